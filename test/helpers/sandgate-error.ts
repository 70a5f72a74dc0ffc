import { expect } from 'vitest';
import { SandgateError, type ErrorCode } from '../../src/domain/errors.js';

/** The error `fn` throws, which must be a SandgateError with `code` and a message matching `pattern`. */
export function expectSandgateError(fn: () => unknown, code: ErrorCode, pattern: RegExp): SandgateError {
  let err: unknown;
  try {
    fn();
  } catch (e) {
    err = e;
  }
  expect(err).toBeInstanceOf(SandgateError);
  const e = err as SandgateError;
  expect(e.code).toBe(code);
  expect(e.message).toMatch(pattern);
  return e;
}

import { SandgateError } from '../../domain/errors.js';

/**
 * An error of the remote driver, reported through `DriverSink.error` (it never reaches a client). A
 * SandgateError (`driver_message_invalid` or `driver_unavailable`) that also names the message field at
 * fault, so an operator can see which part of a driver's message broke the contract.
 */
export class DriverError extends SandgateError {
  /** The message field at fault (`upserted.conditions[1].status`), when one is. */
  readonly field: string | undefined;

  constructor(code: 'driver_message_invalid' | 'driver_unavailable', message?: string, options?: { cause?: unknown; field?: string }) {
    super(code, message, { cause: options?.cause, details: options?.field === undefined ? undefined : { field: options.field } });
    this.name = 'DriverError';
    this.field = options?.field;
  }
}

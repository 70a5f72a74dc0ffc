import type { ServerResponse } from 'node:http';
import { ERROR_CODES, type ErrorCode } from '../domain/errors.js';

/** JSON answers of the admin API. Errors are `{code, message}` with the code's status. */

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store', ...headers }).end(text);
}

export function sendError(res: ServerResponse, code: ErrorCode, message?: string, headers?: Record<string, string>): void {
  sendJson(res, ERROR_CODES[code].status, { code, message: message ?? ERROR_CODES[code].message }, headers);
}

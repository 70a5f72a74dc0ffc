import type { ServerResponse } from 'node:http';
import { ERROR_CODES, type ErrorCode } from '../domain/errors.js';

/** JSON answers of the admin API. Errors are `{code, message}` with the code's status. */

/**
 * No operator-surface answer may be framed by another site (clickjacking: the console shows tenant data
 * and holds an API key): CSP `frame-ancestors 'none'` (CSP Level 2) and, for browsers without it,
 * `X-Frame-Options: DENY` (RFC 7034). A page with a policy of its own includes the directive.
 */
export const FRAME_ANCESTORS_NONE = "frame-ancestors 'none'";

/** Sets the no-framing headers on a response of the operator surface, before its route writes the head. */
export function refuseFraming(res: ServerResponse): void {
  res.setHeader('x-frame-options', 'DENY');
  res.setHeader('content-security-policy', FRAME_ANCESTORS_NONE);
}

export function sendJson(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store', ...headers }).end(text);
}

export function sendError(res: ServerResponse, code: ErrorCode, message?: string, headers?: Record<string, string>): void {
  sendJson(res, ERROR_CODES[code].status, { code, message: message ?? ERROR_CODES[code].message }, headers);
}

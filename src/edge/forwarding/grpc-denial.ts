import type { Deny } from '../../domain/decide.js';
import type { ClientResponse } from './client-side.js';
import { ERROR_HEADER } from '../denial.js';
import { H2Response } from './h2-request.js';

/**
 * A denial as a gRPC client reads it (docs/errors.md): a trailers-only response (HTTP 200, the status in
 * the head, END_STREAM on it; gRPC over HTTP/2, "Responses") with `grpc-status` mapped from the HTTP
 * status and `grpc-message` naming the sandgate code.
 */

/** gRPC status codes (grpc/doc/statuscodes.md) by the denial's HTTP status. */
const GRPC_BY_HTTP: Readonly<Record<number, number>> = {
  400: 3,
  401: 16,
  403: 7,
  404: 5,
  409: 9,
  410: 9,
  429: 8,
  501: 12,
  502: 14,
  503: 14,
  504: 4,
};

const UNKNOWN = 2;

export function grpcStatusOf(httpStatus: number): number {
  return GRPC_BY_HTTP[httpStatus] ?? UNKNOWN;
}

/** grpc-message is percent-encoded: every byte outside 0x20–0x7E, and `%` itself (gRPC over HTTP/2). */
export function grpcMessage(text: string): string {
  let out = '';
  for (const byte of Buffer.from(text, 'utf8')) out += byte >= 0x20 && byte <= 0x7e && byte !== 0x25 ? String.fromCharCode(byte) : '%' + byte.toString(16).toUpperCase().padStart(2, '0');
  return out;
}

/** Answers `d` to a gRPC client; returns 0 (no body), or -1 when the response had started. */
export function respondGrpcDenial(res: ClientResponse, d: Deny): number {
  if (res.headersSent || res.destroyed) return -1;
  const headers = ['content-type', 'application/grpc', 'grpc-status', String(grpcStatusOf(d.status)), 'grpc-message', grpcMessage(`${d.code}: ${d.message}`), ERROR_HEADER, d.code];
  if (d.retryAfter !== undefined) headers.push('retry-after', String(d.retryAfter));
  if (res instanceof H2Response) res.writeHeadForTrailers(200, headers, true);
  else {
    res.writeHead(200, [...headers, 'content-length', '0']);
    res.end();
  }
  return 0;
}

/**
 * What a sandbox's answer must be for the gateway to pass it on: a final status a client may be given
 * (RFC 9110 §15: a three-digit code, 100–599; 1xx are interim answers, and `101 Switching Protocols`
 * answers only a request that asked to upgrade, which a forwarded plain request never does), and header
 * lines `writeHead` accepts. Anything else is not a valid HTTP response for the request: its client gets
 * 502 `upstream_error` on every path (direct, relay, the proxy's front and node:http) — never the bytes,
 * never a hang.
 */

/** The sandbox's answer was not a valid HTTP response for the request (forwarding/failure-codes.ts: `upstream_error`). */
export class InvalidUpstreamResponse extends Error {
  readonly code = 'UPSTREAM_INVALID_RESPONSE';

  constructor(what: string, cause?: unknown) {
    super(`the sandbox's answer is not a valid HTTP response: ${what}`, cause === undefined ? undefined : { cause });
    this.name = 'InvalidUpstreamResponse';
  }
}

/** True for a status a client may get as the final answer to a forwarded request. */
export function isFinalStatus(status: number): boolean {
  return Number.isInteger(status) && status >= 200 && status <= 599;
}

/** True for an interim answer a final one follows (100 Continue, 102, 103 Early Hints): not passed on. */
export function isInterimStatus(status: number): boolean {
  return status >= 100 && status < 200 && status !== 101;
}

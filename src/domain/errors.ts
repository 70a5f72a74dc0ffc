/**
 * The one table of sandgate's error codes. Every code a client, an operator or a peer can see is listed
 * here with its HTTP status and default message, and in docs/errors.md (a test keeps the two in step).
 * Retired codes are never reused.
 */
export const ERROR_CODES = {
  // Routing decisions (every front door).
  invalid_route: { status: 400, message: 'The request does not name a valid sandbox route' },
  api_key_required: { status: 401, message: 'An API key (X-API-Key) is required' },
  api_key_invalid: { status: 401, message: 'The API key is unknown or revoked' },
  token_required: { status: 401, message: 'This sandbox requires a traffic access token' },
  token_invalid: { status: 401, message: 'The traffic access token is wrong' },
  port_not_allowed: { status: 403, message: 'The sandbox does not expose this port' },
  sandbox_not_found: { status: 404, message: 'No such sandbox' },
  sandbox_paused: { status: 409, message: 'The sandbox is paused' },
  too_many_connections: { status: 429, message: 'Too many concurrent connections to this sandbox' },
  sandbox_gone: { status: 410, message: 'The sandbox is being deleted or has expired' },
  sandbox_failed: { status: 502, message: 'The sandbox has failed' },
  sandbox_unreachable: { status: 502, message: 'The sandbox has no network route from this gateway' },
  sandbox_not_ready: { status: 503, message: 'The sandbox is not ready yet' },
  sandbox_resume_failed: { status: 503, message: 'The sandbox could not be resumed' },
  gateway_not_ready: { status: 503, message: 'The gateway has not synced its sandbox drivers yet' },
  gateway_busy: { status: 503, message: 'Too many requests are waiting for sandboxes to become ready' },
  internal_error: { status: 500, message: 'Internal gateway error' },
  // The embedded proxy, reaching the sandbox.
  port_not_open: { status: 502, message: 'Nothing is listening on this port in the sandbox' },
  upstream_error: { status: 502, message: 'The connection to the sandbox failed' },
  upstream_timeout: { status: 504, message: 'The sandbox did not answer in time' },
  // The relay (sandboxes reached over their supervisor session).
  relay_busy: { status: 503, message: 'Too many relay streams to this sandbox or through this gateway' },
  relay_unauthorized: { status: 401, message: 'The relay listener needs a valid relay secret' },
  // Supervisor sessions: sent in a `rejected` frame before the WebSocket close code (docs/supervisor-protocol.md).
  session_expired: { status: 401, message: 'The session token expired and was not refreshed (close 4440)' },
  signing_key_revoked: { status: 401, message: 'The key that signed the session token was removed (close 4441)' },
  // Admin API.
  not_found: { status: 404, message: 'No such resource' },
  invalid_request: { status: 400, message: 'The request is malformed' },
  method_not_allowed: { status: 405, message: 'Method not allowed' },
  // Drivers (reported to operators through the driver sink and logs, never to clients).
  driver_message_invalid: { status: 502, message: 'The driver sent an invalid message; it was dropped' },
  driver_unavailable: { status: 503, message: 'The driver cannot be reached' },
  // Configuration and start-up (reported to operators, never to clients).
  config_invalid: { status: 500, message: 'The configuration is invalid' },
  sandboxes_file_invalid: { status: 500, message: 'The sandboxes file is invalid' },
  listen_failed: { status: 500, message: 'A listener could not bind its address' },
  start_failed: { status: 500, message: 'A part of the gateway could not start' },
} as const satisfies Record<string, { status: number; message: string }>;

export type ErrorCode = keyof typeof ERROR_CODES;

/** A typed error: stable machine-readable code, HTTP status, human message and optional cause. */
export class SandgateError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly details: Readonly<Record<string, unknown>> | undefined;

  constructor(code: ErrorCode, message?: string, options?: { cause?: unknown; details?: Record<string, unknown> }) {
    super(message ?? ERROR_CODES[code].message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'SandgateError';
    this.code = code;
    this.status = ERROR_CODES[code].status;
    this.details = options?.details;
  }
}

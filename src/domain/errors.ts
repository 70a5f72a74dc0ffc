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
  envd_token_invalid: { status: 401, message: "The X-Access-Token does not match this sandbox's envd access token" },
  link_accepted: { status: 303, message: 'The link is valid: continue at the same address without its token (the session cookie is set)' },
  link_invalid: { status: 403, message: 'The link is not valid for this request' },
  link_expired: { status: 401, message: 'The link has expired' },
  link_revoked: { status: 401, message: 'The link was revoked' },
  access_denied: { status: 403, message: "This sandbox port's access policy does not admit this caller" },
  credential_required: { status: 401, message: "This sandbox port's access policy needs a credential (a workload token: Authorization: Bearer <JWT>)" },
  jwt_invalid: { status: 401, message: 'The workload token (JWT) is not valid' },
  cors_preflight: { status: 204, message: 'A CORS preflight to a private port, answered by the gateway' },
  port_not_allowed: { status: 403, message: 'The sandbox does not expose this port' },
  port_not_tcp: { status: 409, message: 'The port is not declared TCP: a tunnel reaches only a port the sandbox declares with protocol tcp' },
  sandbox_not_found: { status: 404, message: 'No such sandbox' },
  sandbox_paused: { status: 409, message: 'The sandbox is paused' },
  too_many_connections: { status: 429, message: 'Too many concurrent connections to this sandbox' },
  too_many_tunnels: { status: 429, message: 'The namespace has its maximum of open tunnels on this gateway' },
  namespace_quota_exceeded: { status: 429, message: 'The namespace already runs its maximum of sandboxes: this one cannot be woken now' },
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
  upgrade_not_supported: { status: 501, message: 'The port speaks h2c (HTTP/2): a WebSocket to it is not carried' },
  // The relay (sandboxes reached over their supervisor session).
  relay_busy: { status: 503, message: 'Too many relay streams to this sandbox or through this gateway' },
  relay_unauthorized: { status: 401, message: 'The relay listener needs a valid relay credential' },
  // Supervisor sessions: sent in a `rejected` frame before the WebSocket close code (docs/supervisor-protocol.md).
  session_expired: { status: 401, message: 'The session token expired and was not refreshed (close 4440)' },
  signing_key_revoked: { status: 401, message: 'The key that signed the session token was removed (close 4441)' },
  token_missing: { status: 401, message: 'An Authorization: Bearer supervisor token is required' },
  token_expired: { status: 401, message: 'The supervisor token has expired' },
  sandbox_mismatch: { status: 403, message: 'The token names another sandbox (close 4403)' },
  upgrade_required: { status: 426, message: 'The supervisor endpoint speaks WebSocket only' },
  unsupported_subprotocol: { status: 400, message: 'The supervisor must offer the sandgate subprotocol' },
  too_many_sessions: { status: 503, message: 'The gateway holds its maximum of supervisor sessions (429 when per source)' },
  service_restart: { status: 503, message: 'The gateway is shutting down: reconnect, to any gateway (close 1012)' },
  // Admin API.
  not_found: { status: 404, message: 'No such resource' },
  invalid_request: { status: 400, message: 'The request is malformed' },
  method_not_allowed: { status: 405, message: 'Method not allowed' },
  too_many_watches: { status: 429, message: 'Too many watch streams open for this caller or on this gateway' },
  link_not_found: { status: 404, message: 'No such link, or not one this caller may revoke' },
  link_revocations_exceeded: { status: 429, message: 'The namespace holds its maximum of link revocations' },
  // Drivers (reported to operators through the driver sink and logs, never to clients).
  driver_message_invalid: { status: 502, message: 'The driver sent an invalid message; it was dropped' },
  driver_unavailable: { status: 503, message: 'The driver cannot be reached' },
  driver_unsupported: { status: 501, message: 'The driver does not support this operation (e.g. pausing idle sandboxes)' },
  // Configuration and start-up (reported to operators, never to clients).
  config_invalid: { status: 500, message: 'The configuration is invalid' },
  sandboxes_file_invalid: { status: 500, message: 'The sandboxes file is invalid' },
  listen_failed: { status: 500, message: 'A listener could not bind its address' },
  start_failed: { status: 500, message: 'A part of the gateway could not start' },
  presence_shards_mismatch: { status: 500, message: 'Gateways sharing Redis presence use different --presence-shards' },
  tls_certificate_invalid: { status: 500, message: 'A TLS certificate or key file could not be loaded' },
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

/**
 * The gRPC status of an ext_authz answer (google.rpc.Code): OK for an allow; PERMISSION_DENIED for every
 * denial, whatever went wrong — a failed readiness wait or an internal error included — with the error
 * code as the status message and the HTTP denial in `denied_response`, so Envoy always has an answer to
 * send (any non-OK status makes it use `denied_response`).
 */
export const GRPC_STATUS = { allow: 0, deny: 7 } as const;

/**
 * WebSocket close codes of the supervisor endpoint (RFC 6455 §7.4: 4000–4999 are for private use; ours
 * mirror HTTP statuses where one fits, 4401 ≈ 401). The `rejected` frame before a close carries an
 * ERROR_CODES code where there is one.
 */
export const CLOSE_CODES = {
  /** The supervisor said goodbye. */
  normal: 1000,
  /** A frame larger than the limit (ws enforces maxPayload with 1009). */
  tooBig: 1009,
  /** The gateway is shutting down gracefully: reconnect, to any gateway, at once. */
  serviceRestart: 1012,
  /** A newer session for the same sandbox replaced this one. Do not reconnect this socket. */
  superseded: 4000,
  /** No frame from the peer for 3 heartbeat intervals. */
  heartbeatTimeout: 4001,
  /** Malformed frame: not JSON, not an object, missing or invalid fields, or a malformed relay frame. */
  malformed: 4400,
  /** Missing, expired, wrong-audience, wrongly signed or `alg: none` token. */
  unauthorized: 4401,
  /** hello, or a refresh token, names a sandbox other than the session's token. */
  forbidden: 4403,
  /** No hello within the hello timeout. */
  helloTimeout: 4408,
  /** This gateway lost the sandbox's presence to a newer claim elsewhere (it was partitioned or paused). */
  presenceLost: 4409,
  /**
   * A frame of a type not allowed now: unknown type, a second hello, binary frames before accepted, a
   * relay frame only the other side may send, anything before hello.
   */
  unexpected: 4415,
  /**
   * The session's token expired and no `refresh` frame replaced it in time: the gateway closes at its last
   * heartbeat round before `exp`. Reconnect only with a fresh token.
   */
  tokenExpired: 4440,
  /** The key that signed the session's token was removed from the gateway's key set (rotation). Reconnect only with a token signed by a current key. */
  keyRevoked: 4441,
  /** The gateway failed to record the session. Reconnect with backoff. */
  internal: 4500,
} as const;

import type { ErrorCode } from '../../domain/errors.js';
import { RelayError } from '../../sessions/relay-stream.js';

/**
 * The one mapping from a failure to forward a request — before any response byte reached the client —
 * to the error code the client gets, for every forwarding path: the embedded proxy to a sandbox (HTTP
 * and WebSocket), the hop to a peer gateway's relay listener, and a relay stream over a supervisor
 * session (proxy, relay listener and WebSocket tunnel alike).
 */

/** Where the failure happened. */
export type ForwardHop =
  /** Connecting to, or waiting on, the sandbox itself. */
  | 'sandbox'
  /** Reaching the relay listener of the gateway that holds the sandbox's session. */
  | 'peer_gateway'
  /** A relay stream over this gateway's supervisor session. */
  | 'relay_stream';

const RELAY_REASONS: Readonly<Record<string, ErrorCode>> = {
  busy: 'relay_busy',
  refused: 'port_not_open',
  timeout: 'upstream_timeout',
  not_allowed: 'port_not_allowed',
  no_session: 'sandbox_unreachable',
};

/** Network errors that mean "no path to there", as opposed to a sandbox that answered badly. */
const UNREACHABLE = new Set(['ECONNREFUSED', 'ECONNRESET', 'EHOSTUNREACH', 'ENETUNREACH', 'UND_ERR_CONNECT_TIMEOUT', 'ETIMEDOUT']);
/** Timeouts: connecting (undici's or our own `ETIMEDOUT`) or waiting for the response head. */
const TIMEOUTS = new Set(['UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'ETIMEDOUT']);

export function forwardFailure(hop: ForwardHop, err: unknown): ErrorCode {
  if (err instanceof RelayError) return RELAY_REASONS[err.reason] ?? 'upstream_error';
  const code = (err as { code?: unknown } | undefined)?.code;
  if (typeof code !== 'string') return 'upstream_error';
  switch (hop) {
    case 'sandbox':
      if (code === 'ECONNREFUSED') return 'port_not_open';
      return TIMEOUTS.has(code) ? 'upstream_timeout' : 'upstream_error';
    case 'peer_gateway':
      // The peer is down or partitioned: the sandbox has no route from here (its head timing out is
      // the sandbox's slowness, reported as such).
      if (code === 'UND_ERR_HEADERS_TIMEOUT') return 'upstream_timeout';
      return UNREACHABLE.has(code) ? 'sandbox_unreachable' : 'upstream_error';
    case 'relay_stream':
      return code === 'ETIMEDOUT' || code === 'UND_ERR_HEADERS_TIMEOUT' ? 'upstream_timeout' : 'upstream_error';
  }
}

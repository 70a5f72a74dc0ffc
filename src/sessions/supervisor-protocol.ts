import { isDnsLabel } from '../domain/labels.js';
import { CLOSE_CODES, type ErrorCode } from '../domain/errors.js';

/**
 * The supervisor protocol (docs/supervisor-protocol.md documents every message and close code). JSON text
 * frames for the session itself; after `accepted`, binary frames carry relay streams (relay-frames.ts).
 *
 * The WebSocket subprotocol names the framing, which has not changed since version 1; the protocol
 * version and the optional features are negotiated in `hello` and `accepted`. A version 1 supervisor
 * sends neither field and reads neither (it ignores fields it does not know), so it keeps working; a
 * version 1 gateway ignores them in `hello` and answers without them, which a newer supervisor reads as
 * version 1. A feature is used on a session only when both sides announced it.
 */

export const SUBPROTOCOL = 'sandgate.supervisor.v1';
/** The protocol version this build speaks; it understands every earlier one. */
export const PROTOCOL_VERSION = 2;
/**
 * Optional features: `relay` (the supervisor takes relay streams), `move` (the gateway may ask the
 * supervisor to move its session, which it does make-before-break). What a version 1 peer has, unsaid.
 */
export const FEATURES = ['relay', 'move'] as const;
export type Feature = (typeof FEATURES)[number];
export const V1_FEATURES: readonly Feature[] = ['relay'];
const MAX_FEATURES = 32;

/** The features a session uses: those both sides announced (a side that announced none is version 1). */
export function negotiated(mine: readonly Feature[], theirs: readonly string[] | undefined): Feature[] {
  const other = theirs ?? V1_FEATURES;
  return mine.filter((f) => other.includes(f));
}
export const SUPERVISOR_PATH = '/v1/supervisor';

/**
 * Close codes, listed with every other code a client or supervisor can see in src/domain/errors.ts.
 * 1000–1015 are RFC 6455 §7.4.1 / IANA codes; 4000–4999 are reserved by RFC 6455 §7.4.2 for private use,
 * and ours mirror HTTP statuses where one fits (4401 ≈ 401) so they read at a glance.
 */
export const CLOSE = CLOSE_CODES;

export type CloseName = keyof typeof CLOSE;

/**
 * Close codes counted as themselves in metrics: the gateway's own, plus what a peer's close commonly
 * says — 1001 going away, 1006 no close frame (RFC 6455 §7.4.1; 1006 is never sent, the library
 * reports it). Any other code a peer sends counts as `other`, so a hostile peer cannot grow the label set.
 */
export const COUNTED_CLOSE_CODES: readonly number[] = [...new Set([...Object.values(CLOSE), 1001, 1006])].sort((a, b) => a - b);
const COUNTED = new Set(COUNTED_CLOSE_CODES);

/** The metric label for a close code. */
export function closeCodeLabel(code: number): string {
  return COUNTED.has(code) ? String(code) : 'other';
}

/** Close codes after which a supervisor reconnects at once (to this or another gateway). */
export const RECONNECT_AT_ONCE: ReadonlySet<number> = new Set([CLOSE.serviceRestart, CLOSE.presenceLost]);
/** Close codes after which reconnecting with the same credentials is pointless. */
export const DO_NOT_RETRY: ReadonlySet<number> = new Set([CLOSE.unauthorized, CLOSE.forbidden, CLOSE.superseded, CLOSE.tokenExpired, CLOSE.keyRevoked]);

export interface Hello {
  readonly type: 'hello';
  readonly namespace: string;
  readonly name: string;
  readonly instanceId: string;
  readonly version: string;
  /** Absent from a version 1 supervisor. */
  readonly protocol?: number;
  /** Absent from a version 1 supervisor (which takes relay streams and knows no other feature). */
  readonly features?: readonly string[];
}

export interface Accepted {
  readonly type: 'accepted';
  readonly sessionId: string;
  readonly epoch: number;
  readonly heartbeatIntervalMs: number;
  /** Largest frame the gateway accepts: the supervisor cuts relay DATA to fit (an older gateway omits it). */
  readonly maxFrameBytes?: number;
  /** Epoch ms the session ends unless refreshed: the token's `exp` (an older gateway omits it). */
  readonly expiresAt?: number;
  /** The gateway's protocol version (a version 1 gateway omits it). */
  readonly protocol?: number;
  /** The features this session uses: both sides announced them (a version 1 gateway omits it). */
  readonly features?: readonly string[];
}

/**
 * Asks the supervisor to move its session (feature `move`): it opens a new session — to `gateway` when
 * given, else to any other gateway it knows — and keeps this one until the gateway closes it, which the
 * epoch fence does once the new session's claim is seen. `reason` is `rebalance` or `drain`.
 */
export interface Move {
  readonly type: 'move';
  readonly gateway?: string;
  readonly reason: 'rebalance' | 'drain';
}

export interface Rejected {
  readonly type: 'rejected';
  /** One of ERROR_CODES (a token rejection, `sandbox_mismatch`, `session_expired`, …). */
  readonly code: ErrorCode;
  readonly message: string;
}

export interface Heartbeat {
  readonly type: 'ping' | 'pong';
  /** Sender's clock (epoch ms), echoed in the pong: lets either side measure round trips. */
  readonly t: number;
}

/** A fresh token for the session, before the current one expires. Verified like the hello token. */
export interface Refresh {
  readonly type: 'refresh';
  readonly token: string;
}

/** The refresh was accepted: the session now lasts until `expiresAt` (epoch ms, the new token's `exp`). */
export interface Refreshed {
  readonly type: 'refreshed';
  readonly expiresAt: number;
}

export type ClientMessage = Hello | Heartbeat | Refresh;
export type ServerMessage = Accepted | Rejected | Heartbeat | Refreshed | Move;

/** Why a frame was refused: the close code and a short reason (≤ 123 bytes, RFC 6455 §5.5). */
export interface FrameError {
  readonly close: number;
  readonly code: string;
  readonly message: string;
}

const MAX_ID = 128;
/** A JWT is three base64url parts: far below this. Bounds what one frame can make the gateway verify. */
const MAX_TOKEN = 8192;

function frameError(close: number, code: string, message: string): FrameError {
  return { close, code, message };
}

function printable(s: unknown, max: number): s is string {
  if (typeof s !== 'string' || s.length === 0 || s.length > max) return false;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

/** Parses a text frame from a supervisor. Never throws. */
// Parses and checks field by field like redis-codec.ts decodeMessage: a frame from a supervisor and a
// presence message from Redis are different inputs with different errors (a close code vs a skip).
export function parseClientFrame(text: string): ClientMessage | FrameError {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return frameError(CLOSE.malformed, 'malformed_frame', 'frame is not JSON');
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return frameError(CLOSE.malformed, 'malformed_frame', 'frame is not a JSON object');
  const m = v as Record<string, unknown>;
  switch (m.type) {
    case 'hello':
      if (typeof m.namespace !== 'string' || !isDnsLabel(m.namespace)) return frameError(CLOSE.malformed, 'malformed_frame', 'hello.namespace must be a DNS-1123 label');
      if (typeof m.name !== 'string' || !isDnsLabel(m.name)) return frameError(CLOSE.malformed, 'malformed_frame', 'hello.name must be a DNS-1123 label');
      if (!printable(m.instanceId, MAX_ID)) return frameError(CLOSE.malformed, 'malformed_frame', 'hello.instanceId must be 1-128 printable ASCII characters');
      if (!printable(m.version, 64)) return frameError(CLOSE.malformed, 'malformed_frame', 'hello.version must be 1-64 printable ASCII characters');
      if (m.protocol !== undefined && (!Number.isSafeInteger(m.protocol) || (m.protocol as number) < 1)) return frameError(CLOSE.malformed, 'malformed_frame', 'hello.protocol must be a positive integer');
      if (m.features !== undefined && !(Array.isArray(m.features) && m.features.length <= MAX_FEATURES && m.features.every((f) => printable(f, 64)))) {
        return frameError(CLOSE.malformed, 'malformed_frame', `hello.features must be at most ${MAX_FEATURES} strings of 1-64 printable ASCII characters`);
      }
      return {
        type: 'hello',
        namespace: m.namespace,
        name: m.name,
        instanceId: m.instanceId,
        version: m.version,
        ...(m.protocol === undefined ? {} : { protocol: m.protocol as number }),
        ...(m.features === undefined ? {} : { features: m.features as string[] }),
      };
    case 'refresh':
      if (!printable(m.token, MAX_TOKEN)) return frameError(CLOSE.malformed, 'malformed_frame', `refresh.token must be 1-${MAX_TOKEN} printable ASCII characters`);
      return { type: 'refresh', token: m.token };
    case 'ping':
    case 'pong':
      if (typeof m.t !== 'number' || !Number.isFinite(m.t)) return frameError(CLOSE.malformed, 'malformed_frame', `${m.type}.t must be a number`);
      return { type: m.type, t: m.t };
    default:
      return frameError(CLOSE.unexpected, 'unexpected_frame', `unknown frame type ${JSON.stringify(String(m.type)).slice(0, 40)}`);
  }
}

export function isFrameError(v: ClientMessage | FrameError): v is FrameError {
  return 'close' in v;
}

import { CLOSE } from './supervisor-protocol.js';

/**
 * The relay frames: binary WebSocket frames on a supervisor session after `accepted`, carrying many
 * byte streams at once (docs/supervisor-protocol.md, "Relay streams"). Every frame is
 *
 *     [type u8][stream id u32 BE][payload]
 *
 * Only the gateway opens streams (it picks the ids, counting up from 1); an OPEN names a port and
 * nothing else, so a supervisor can only ever dial its own loopback. Flow control is per stream and
 * credit-based: each side announces a receive window (OPEN, OPEN_OK) and returns credit with WINDOW as
 * its consumer drains bytes, so a sender never has more than the window in flight.
 */

export const HEADER_BYTES = 5;

export const FRAME = {
  /** gateway → supervisor. Payload: port u16, the gateway's receive window u32. */
  open: 1,
  /** supervisor → gateway: connected. Payload: the supervisor's receive window u32. */
  openOk: 2,
  /** supervisor → gateway: not connected. Payload: reason u8 (OPEN_FAIL). */
  openFail: 3,
  /** Both ways: stream bytes (never empty), within the receiver's window. */
  data: 4,
  /** Both ways: credit increment u32 (≥ 1). */
  window: 5,
  /** Both ways: the sender sends no more DATA (half-close, like a TCP FIN). No payload. */
  close: 6,
  /** Both ways: abort the stream in both directions (like a TCP RST). Payload: reason u8 (RESET). */
  reset: 7,
} as const;

/** Why a supervisor did not open a stream. */
export const OPEN_FAIL = {
  /** Nothing listens on that port (ECONNREFUSED). */
  refused: 1,
  /** Connecting to the port took too long. */
  timeout: 2,
  /** The supervisor does not relay to that port. */
  notAllowed: 3,
  /** The supervisor holds its maximum of streams. */
  busy: 4,
  /** Any other failure. */
  error: 5,
} as const;

export const RESET = {
  /** One side gave up on the stream (client gone, idle, cancelled open). */
  aborted: 1,
  /** The peer sent more DATA than the window allowed, or a window past 2^31. */
  flowControl: 2,
  /** The socket behind the stream failed. */
  error: 3,
} as const;

export type OpenFailReason = (typeof OPEN_FAIL)[keyof typeof OPEN_FAIL];
export type ResetReason = (typeof RESET)[keyof typeof RESET];

export type RelayFrame =
  | { readonly type: 'open'; readonly id: number; readonly port: number; readonly window: number }
  | { readonly type: 'open_ok'; readonly id: number; readonly window: number }
  | { readonly type: 'open_fail'; readonly id: number; readonly reason: OpenFailReason }
  | { readonly type: 'data'; readonly id: number; readonly data: Buffer }
  | { readonly type: 'window'; readonly id: number; readonly increment: number }
  | { readonly type: 'close'; readonly id: number }
  | { readonly type: 'reset'; readonly id: number; readonly reason: ResetReason };

/** A frame that breaks the protocol: the session is closed with `close`. */
export interface RelayFrameError {
  readonly close: number;
  readonly message: string;
}

/** Largest window or credit total a side may announce (keeps every sum a safe small integer). */
export const MAX_WINDOW = 2 ** 31 - 1;

function head(type: number, id: number, payload: number): Buffer {
  const b = Buffer.allocUnsafe(HEADER_BYTES + payload);
  b[0] = type;
  b.writeUInt32BE(id, 1);
  return b;
}

export function encodeOpen(id: number, port: number, window: number): Buffer {
  const b = head(FRAME.open, id, 6);
  b.writeUInt16BE(port, 5);
  b.writeUInt32BE(window, 7);
  return b;
}

export function encodeOpenOk(id: number, window: number): Buffer {
  const b = head(FRAME.openOk, id, 4);
  b.writeUInt32BE(window, 5);
  return b;
}

export function encodeOpenFail(id: number, reason: OpenFailReason): Buffer {
  const b = head(FRAME.openFail, id, 1);
  b[5] = reason;
  return b;
}

/** One copy of the chunk: a WebSocket message is one buffer. */
export function encodeData(id: number, chunk: Buffer): Buffer {
  const b = head(FRAME.data, id, chunk.length);
  chunk.copy(b, HEADER_BYTES);
  return b;
}

export function encodeWindow(id: number, increment: number): Buffer {
  const b = head(FRAME.window, id, 4);
  b.writeUInt32BE(increment, 5);
  return b;
}

export function encodeClose(id: number): Buffer {
  return head(FRAME.close, id, 0);
}

export function encodeReset(id: number, reason: ResetReason): Buffer {
  const b = head(FRAME.reset, id, 1);
  b[5] = reason;
  return b;
}

function malformed(message: string): RelayFrameError {
  return { close: CLOSE.malformed, message };
}

const FAIL_REASONS: ReadonlySet<number> = new Set(Object.values(OPEN_FAIL));
const RESET_REASONS: ReadonlySet<number> = new Set(Object.values(RESET));

/** Decodes one binary frame. Never throws; the DATA payload is a view into `b`, not a copy. */
export function decodeFrame(b: Buffer): RelayFrame | RelayFrameError {
  if (b.length < HEADER_BYTES) return malformed('relay frame shorter than its 5-byte header');
  const type = b[0]!;
  const id = b.readUInt32BE(1);
  if (id === 0) return malformed('relay stream id 0 is reserved');
  const n = b.length - HEADER_BYTES;
  const exact = (want: number, what: string): RelayFrameError | undefined => (n === want ? undefined : malformed(`${what} payload must be ${want} bytes, not ${n}`));
  switch (type) {
    case FRAME.open: {
      const bad = exact(6, 'OPEN');
      if (bad !== undefined) return bad;
      const port = b.readUInt16BE(5);
      const window = b.readUInt32BE(7);
      if (port === 0) return malformed('OPEN port must be 1-65535');
      if (window === 0 || window > MAX_WINDOW) return malformed('OPEN window must be 1..2^31-1');
      return { type: 'open', id, port, window };
    }
    case FRAME.openOk: {
      const bad = exact(4, 'OPEN_OK');
      if (bad !== undefined) return bad;
      const window = b.readUInt32BE(5);
      if (window === 0 || window > MAX_WINDOW) return malformed('OPEN_OK window must be 1..2^31-1');
      return { type: 'open_ok', id, window };
    }
    case FRAME.openFail: {
      const bad = exact(1, 'OPEN_FAIL');
      if (bad !== undefined) return bad;
      const reason = b[5]!;
      // An unknown reason from a newer peer still means "not opened".
      return { type: 'open_fail', id, reason: (FAIL_REASONS.has(reason) ? reason : OPEN_FAIL.error) as OpenFailReason };
    }
    case FRAME.data:
      if (n === 0) return malformed('DATA must carry at least one byte');
      return { type: 'data', id, data: b.subarray(HEADER_BYTES) };
    case FRAME.window: {
      const bad = exact(4, 'WINDOW');
      if (bad !== undefined) return bad;
      const increment = b.readUInt32BE(5);
      if (increment === 0) return malformed('WINDOW increment must be at least 1');
      return { type: 'window', id, increment };
    }
    case FRAME.close: {
      const bad = exact(0, 'CLOSE');
      return bad ?? { type: 'close', id };
    }
    case FRAME.reset: {
      const bad = exact(1, 'RESET');
      if (bad !== undefined) return bad;
      const reason = b[5]!;
      return { type: 'reset', id, reason: (RESET_REASONS.has(reason) ? reason : RESET.aborted) as ResetReason };
    }
    default:
      return { close: CLOSE.unexpected, message: `unknown relay frame type ${type}` };
  }
}

export function isRelayFrameError(v: RelayFrame | RelayFrameError): v is RelayFrameError {
  return 'close' in v;
}

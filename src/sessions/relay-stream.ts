import { Duplex } from 'node:stream';
import { encodeClose, encodeData, encodeOpenFail, encodeOpenOk, encodeReset, encodeWindow, MAX_WINDOW, OPEN_FAIL, RESET, type OpenFailReason, type ResetReason } from './relay-frames.js';

/**
 * One relay stream: a Duplex whose bytes ride a supervisor session as DATA frames, with per-stream
 * credit-based flow control in both directions (relay-frames.ts).
 *
 * Receiving: DATA goes to a queue (never more than our window, which the peer may not exceed); bytes
 * move from the queue into the readable side only when its consumer asks (`_read`), and only then are
 * they credited back with WINDOW. A consumer that stops reading therefore stops the peer after one
 * window, and this side holds at most the window plus the readable high-water mark.
 *
 * Sending: a write is cut into DATA frames no larger than the peer's frame limit and sent while credit
 * lasts and the WebSocket is below its high-water mark; otherwise the write's callback waits, so the
 * producer (a socket piped in) is held back by ordinary stream backpressure.
 */

export type RelayFailure =
  /** This gateway holds no session for the sandbox. */
  | 'no_session'
  /** Past a cap on streams (gateway or supervisor). */
  | 'busy'
  /** Nothing listens on the port in the sandbox. */
  | 'refused'
  /** The supervisor did not answer OPEN in time, or could not connect in time. */
  | 'timeout'
  /** The supervisor does not relay to that port. */
  | 'not_allowed'
  /** The peer reset the stream. */
  | 'reset'
  /** The session carrying the stream ended. */
  | 'session_closed'
  /** This side cancelled the stream before it opened. */
  | 'aborted'
  | 'failed';

/** Why a relay stream failed. `code` follows Node's `ERR_*` convention so generic socket code can log it. */
export class RelayError extends Error {
  readonly code: string;

  constructor(
    readonly reason: RelayFailure,
    message: string,
  ) {
    super(message);
    this.name = 'RelayError';
    this.code = 'ERR_RELAY_' + reason.toUpperCase();
  }
}

const FAIL_TO_REASON: Readonly<Record<number, RelayFailure>> = {
  [OPEN_FAIL.refused]: 'refused',
  [OPEN_FAIL.timeout]: 'timeout',
  [OPEN_FAIL.notAllowed]: 'not_allowed',
  [OPEN_FAIL.busy]: 'busy',
  [OPEN_FAIL.error]: 'failed',
};

/** What a stream needs from the multiplexer carrying it. */
export interface RelayLink {
  readonly closed: boolean;
  /** Hands one frame to the WebSocket. */
  send(frame: Buffer): void;
  /** False while the WebSocket holds more than its high-water mark. */
  canSend(): boolean;
  /** Calls `s.onWritable()` once the WebSocket has drained below its low-water mark. */
  waitWritable(s: RelayStream): void;
  /** The stream is gone: drop it from the table. */
  forget(s: RelayStream): void;
}

export interface RelayStreamOptions {
  /** This side's receive window. */
  readonly windowBytes: number;
  /** Largest DATA payload to send. */
  readonly maxChunkBytes: number;
}

type Phase = 'opening' | 'open' | 'closed';

export class RelayStream extends Duplex {
  private phase: Phase = 'opening';
  private sendCredit = 0;
  /** Bytes received and not yet credited back: never above the window. */
  private inFlight = 0;
  /** Bytes handed to the readable side since the last WINDOW. */
  private uncredited = 0;
  private readonly creditEvery: number;
  private readonly queue: Buffer[] = [];
  private queued = 0;
  private wantRead = false;
  /** The peer sent CLOSE. */
  private eof = false;
  private eofPushed = false;
  private sentClose = false;
  /** No RESET on destroy: the peer already knows (it reset, refused, or the session is gone). */
  private silent = false;
  private pending: { chunk: Buffer; offset: number; cb: (err?: Error | null) => void } | undefined;
  /** The peer's window announced in OPEN (supervisor side), applied on accept(). */
  private peerWindow = 0;
  private idleMs = 0;
  private idleTimer: NodeJS.Timeout | undefined;
  private lastActive = 0;
  /** Times a write had to wait for credit (a slow reader on the other side). */
  creditStalls = 0;

  constructor(
    private readonly link: RelayLink,
    readonly id: number,
    /** The sandbox port this stream reaches. */
    readonly port: number,
    private readonly opts: RelayStreamOptions,
  ) {
    super({ allowHalfOpen: true, decodeStrings: true });
    this.creditEvery = Math.max(1, Math.floor(opts.windowBytes / 4));
  }

  get state(): Phase {
    return this.phase;
  }

  /** Bytes this side holds for the stream: received and not yet read, plus written and not yet sent. */
  get bufferedBytes(): number {
    return this.queued + this.readableLength + this.writableLength;
  }

  /** True while a write waits for the peer's credit. */
  get blockedOnCredit(): boolean {
    return this.pending !== undefined && this.sendCredit <= 0;
  }

  /** Idle timeout like net.Socket's: emits 'timeout' after `ms` without bytes either way (0 = off). */
  setTimeout(ms: number, cb?: () => void): this {
    this.idleMs = ms;
    if (cb !== undefined) this.once('timeout', cb);
    this.touch();
    return this;
  }

  /** The session's own socket already has TCP_NODELAY; accepted for net.Socket compatibility. */
  setNoDelay(): this {
    return this;
  }

  setKeepAlive(): this {
    return this;
  }

  // ---- called by the multiplexer ----

  /** Supervisor side: remembers the gateway's window until the stream is accepted. */
  offered(peerWindow: number): void {
    this.peerWindow = peerWindow;
  }

  /** Supervisor side: the port is connected; tell the gateway and start carrying bytes. */
  accept(): void {
    if (this.phase !== 'opening' || this.destroyed) return;
    this.phase = 'open';
    this.sendCredit = this.peerWindow;
    this.link.send(encodeOpenOk(this.id, this.opts.windowBytes));
    this.emit('open');
  }

  /** Supervisor side: the port could not be connected. */
  refuse(reason: OpenFailReason): void {
    if (this.phase !== 'opening' || this.destroyed) return;
    this.link.send(encodeOpenFail(this.id, reason));
    this.silent = true;
    this.destroy();
  }

  /** Gateway side: OPEN_OK arrived. */
  opened(peerWindow: number): void {
    if (this.phase !== 'opening' || this.destroyed) return;
    this.phase = 'open';
    this.sendCredit = peerWindow;
    this.emit('open');
    this.pump();
  }

  /** Gateway side: OPEN_FAIL arrived. */
  openFailed(reason: OpenFailReason): void {
    this.silent = true;
    this.destroy(new RelayError(FAIL_TO_REASON[reason] ?? 'failed', `the supervisor could not open port ${this.port}`));
  }

  onData(chunk: Buffer): void {
    if (this.destroyed) return;
    this.inFlight += chunk.length;
    if (this.phase !== 'open' || this.eof || this.inFlight > this.opts.windowBytes) return this.fail(RESET.flowControl, 'the peer sent DATA beyond its credit');
    this.touch();
    this.queue.push(chunk);
    this.queued += chunk.length;
    if (this.wantRead) this.deliver();
  }

  onWindow(increment: number): void {
    if (this.destroyed) return;
    this.sendCredit += increment;
    if (this.sendCredit > MAX_WINDOW) return this.fail(RESET.flowControl, 'the peer granted credit past 2^31');
    this.pump();
  }

  onClose(): void {
    if (this.destroyed) return;
    this.eof = true;
    this.deliver();
  }

  onReset(reason: ResetReason): void {
    this.silent = true;
    this.destroy(new RelayError(this.phase === 'opening' ? 'aborted' : 'reset', `the peer reset the stream (reason ${reason})`));
  }

  /** The session ended under the stream. */
  sessionClosed(): void {
    this.silent = true;
    this.destroy(new RelayError('session_closed', 'the supervisor session carrying the stream ended'));
  }

  /** The WebSocket drained: continue a waiting write. */
  onWritable(): void {
    this.pump();
  }

  // ---- Duplex ----

  override _read(): void {
    this.wantRead = true;
    this.deliver();
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    this.touch();
    this.pending = { chunk, offset: 0, cb };
    this.pump();
  }

  override _final(cb: (err?: Error | null) => void): void {
    if (this.phase === 'open' && !this.link.closed) {
      this.sentClose = true;
      this.link.send(encodeClose(this.id));
    }
    cb();
  }

  override _destroy(err: Error | null, cb: (err?: Error | null) => void): void {
    clearTimeout(this.idleTimer);
    const clean = this.sentClose && this.eof;
    if (!this.silent && !clean && !this.link.closed) this.link.send(encodeReset(this.id, err === null ? RESET.aborted : RESET.error));
    this.phase = 'closed';
    this.pending = undefined;
    this.queue.length = 0;
    this.queued = 0;
    this.link.forget(this);
    cb(err);
  }

  // ---- internals ----

  private deliver(): void {
    while (this.wantRead && this.queue.length > 0) {
      const c = this.queue.shift()!;
      this.queued -= c.length;
      this.uncredited += c.length;
      if (!this.push(c)) this.wantRead = false;
    }
    if (this.queue.length === 0 && this.eof && !this.eofPushed) {
      this.eofPushed = true;
      this.push(null);
    }
    // Batched credit: a WINDOW per quarter window. Never stalls: a sender out of credit has a full window
    // in flight, which is either still queued here (and will be read) or already counts toward a batch.
    if (this.uncredited >= this.creditEvery && !this.eof && this.phase === 'open' && !this.link.closed) {
      this.link.send(encodeWindow(this.id, this.uncredited));
      this.inFlight -= this.uncredited;
      this.uncredited = 0;
    }
  }

  private pump(): void {
    const p = this.pending;
    if (p === undefined || this.phase !== 'open' || this.destroyed) return;
    while (p.offset < p.chunk.length) {
      if (this.sendCredit <= 0) {
        this.creditStalls++;
        return;
      }
      if (!this.link.canSend()) return this.link.waitWritable(this);
      const n = Math.min(p.chunk.length - p.offset, this.sendCredit, this.opts.maxChunkBytes);
      this.link.send(encodeData(this.id, p.chunk.subarray(p.offset, p.offset + n)));
      p.offset += n;
      this.sendCredit -= n;
    }
    this.pending = undefined;
    p.cb();
  }

  private fail(reason: ResetReason, message: string): void {
    if (!this.link.closed) this.link.send(encodeReset(this.id, reason));
    this.silent = true;
    this.destroy(new RelayError('reset', message));
  }

  private touch(): void {
    if (this.idleMs <= 0) {
      clearTimeout(this.idleTimer);
      this.idleTimer = undefined;
      return;
    }
    this.lastActive = performance.now();
    // One timer per stream, re-armed lazily: activity only records a time.
    if (this.idleTimer === undefined) this.armIdle(this.idleMs);
  }

  private armIdle(ms: number): void {
    this.idleTimer = setTimeout(() => {
      this.idleTimer = undefined;
      if (this.destroyed || this.idleMs <= 0) return;
      const idle = performance.now() - this.lastActive;
      if (idle >= this.idleMs) this.emit('timeout');
      else this.armIdle(this.idleMs - idle);
    }, ms);
    this.idleTimer.unref();
  }
}

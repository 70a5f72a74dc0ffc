import { CLOSE } from './supervisor-protocol.js';
import { decodeFrame, encodeOpen, encodeReset, isRelayFrameError, OPEN_FAIL, RESET, type RelayFrameError } from './relay-frames.js';
import { RelayError, RelayStream, type RelayLink } from './relay-stream.js';

/**
 * The relay multiplexer: the table of relay streams on one supervisor session, shared by both ends.
 * It decodes incoming binary frames and hands them to their stream, and it watches the WebSocket's own
 * buffer: frames handed to the socket and not yet written count against a high-water mark, past which
 * every stream's sending pauses until the socket drains (per-stream credit bounds the peer; this bounds
 * this process when the network itself is slow).
 */

export interface RelayTransport {
  /** Sends one binary frame; `done` runs once the frame has been written out (or was dropped). */
  send(frame: Buffer, done: () => void): void;
}

export interface RelayMuxOptions {
  readonly role: 'gateway' | 'supervisor';
  readonly transport: RelayTransport;
  /** This side's receive window per stream. */
  readonly windowBytes: number;
  /** Largest DATA payload this side sends (the peer's frame limit minus the 5-byte header). */
  readonly maxChunkBytes: number;
  /** Bytes handed to the WebSocket and not yet written out, above which streams stop sending. */
  readonly highWaterBytes: number;
  /** Supervisor side: a stream the gateway asked for; connect it, then `accept()` or `refuse()` it. */
  readonly onOpen?: (stream: RelayStream) => void;
}

export const DEFAULT_WINDOW_BYTES = 256 * 1024;
export const DEFAULT_CHUNK_BYTES = 64 * 1024;
export const DEFAULT_HIGH_WATER_BYTES = 1024 * 1024;

export class RelayMux implements RelayLink {
  private readonly streams = new Map<number, RelayStream>();
  private readonly blocked = new Set<RelayStream>();
  private nextId = 1;
  /** Highest stream id the peer opened (supervisor side): ids only grow. */
  private lastPeerId = 0;
  private pendingBytes = 0;
  private waking = false;
  closed = false;

  constructor(private readonly opts: RelayMuxOptions) {}

  /** Open streams, including those still opening. */
  get size(): number {
    return this.streams.size;
  }

  /** Bytes held for all streams plus frames not yet written to the WebSocket. */
  bufferedBytes(): number {
    let n = this.pendingBytes;
    for (const s of this.streams.values()) n += s.bufferedBytes;
    return n;
  }

  /** Frames handed to the WebSocket and not yet written out. */
  get wsPendingBytes(): number {
    return this.pendingBytes;
  }

  values(): IterableIterator<RelayStream> {
    return this.streams.values();
  }

  /**
   * Gateway side: asks the supervisor to connect to `port` on its loopback. The stream emits 'open' on
   * OPEN_OK, or fails with a RelayError on OPEN_FAIL; the caller bounds the wait.
   */
  open(port: number): RelayStream {
    if (this.opts.role !== 'gateway') throw new Error('only the gateway opens relay streams');
    if (this.closed) throw new RelayError('session_closed', 'the supervisor session has ended');
    if (this.nextId > 0xffffffff) throw new RelayError('failed', 'this session has used every relay stream id');
    const s = this.stream(this.nextId++, port);
    this.send(encodeOpen(s.id, port, this.opts.windowBytes));
    return s;
  }

  /**
   * One binary frame from the peer. Returns the error to close the session with when the frame breaks
   * the protocol; a frame for a stream already gone (frames cross on the wire) is dropped.
   */
  receive(data: Buffer): RelayFrameError | undefined {
    if (this.closed) return undefined;
    const f = decodeFrame(data);
    if (isRelayFrameError(f)) return f;
    const gateway = this.opts.role === 'gateway';
    if (f.type === 'open') {
      if (gateway) return { close: CLOSE.unexpected, message: 'only the gateway opens relay streams' };
      if (f.id <= this.lastPeerId) return { close: CLOSE.malformed, message: 'relay stream ids must grow' };
      this.lastPeerId = f.id;
      const s = this.stream(f.id, f.port);
      s.offered(f.window);
      if (this.opts.onOpen === undefined) s.refuse(OPEN_FAIL.notAllowed);
      else this.opts.onOpen(s);
      return undefined;
    }
    if ((f.type === 'open_ok' || f.type === 'open_fail') && !gateway) return { close: CLOSE.unexpected, message: `${f.type.toUpperCase()} comes only from a supervisor` };
    const s = this.streams.get(f.id);
    if (s === undefined) {
      if (f.id >= (gateway ? this.nextId : this.lastPeerId + 1)) return { close: CLOSE.malformed, message: `relay frame for stream ${f.id}, which was never opened` };
      // We gave up on this stream (timeout, client gone) while the supervisor was connecting it.
      if (f.type === 'open_ok') this.send(encodeReset(f.id, RESET.aborted));
      return undefined;
    }
    switch (f.type) {
      case 'open_ok':
        if (s.state !== 'opening') return { close: CLOSE.unexpected, message: `a second OPEN_OK for stream ${f.id}` };
        s.opened(f.window);
        return undefined;
      case 'open_fail':
        if (s.state !== 'opening') return { close: CLOSE.unexpected, message: `OPEN_FAIL for open stream ${f.id}` };
        s.openFailed(f.reason);
        return undefined;
      case 'data':
        s.onData(f.data);
        return undefined;
      case 'window':
        s.onWindow(f.increment);
        return undefined;
      case 'close':
        s.onClose();
        return undefined;
      case 'reset':
        s.onReset(f.reason);
        return undefined;
    }
  }

  /** The session ended: every stream fails with `session_closed`, and nothing more is sent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.blocked.clear();
    for (const s of [...this.streams.values()]) s.sessionClosed();
    this.streams.clear();
  }

  // ---- RelayLink ----

  send(frame: Buffer): void {
    if (this.closed) return;
    const n = frame.length;
    this.pendingBytes += n;
    this.opts.transport.send(frame, () => {
      this.pendingBytes -= n;
      if (this.blocked.size > 0 && this.pendingBytes <= this.opts.highWaterBytes / 2) this.wake();
    });
  }

  canSend(): boolean {
    return !this.closed && this.pendingBytes < this.opts.highWaterBytes;
  }

  waitWritable(s: RelayStream): void {
    this.blocked.add(s);
  }

  forget(s: RelayStream): void {
    this.blocked.delete(s);
    if (this.streams.get(s.id) === s) this.streams.delete(s.id);
  }

  private stream(id: number, port: number): RelayStream {
    const s = new RelayStream(this, id, port, { windowBytes: this.opts.windowBytes, maxChunkBytes: this.opts.maxChunkBytes });
    // A peer's RESET can land before anyone listens (while opening, or between OPEN_OK and the caller's
    // first listener): a stream error must never become an uncaught exception. Users add their own
    // listener; 'close' follows every error.
    s.on('error', () => {});
    this.streams.set(id, s);
    return s;
  }

  /** Resumes waiting streams in the order they blocked; a transport that calls back synchronously cannot recurse here. */
  private wake(): void {
    if (this.waking) return;
    this.waking = true;
    try {
      while (this.blocked.size > 0 && this.canSend()) {
        const s = this.blocked.values().next().value as RelayStream;
        this.blocked.delete(s);
        s.onWritable();
      }
    } finally {
      this.waking = false;
    }
  }
}

/** The minimal WebSocket surface the relay needs (ws's WebSocket). */
export interface RelaySocket {
  readonly readyState: number;
  readonly OPEN: number;
  send(data: Buffer, options: { binary: boolean }, cb: (err?: Error) => void): void;
}

/** Carries frames on a ws WebSocket; `done` fires when ws has written the frame to the socket. */
export function wsTransport(ws: RelaySocket): RelayTransport {
  return {
    send(frame, done) {
      if (ws.readyState !== ws.OPEN) {
        queueMicrotask(done);
        return;
      }
      ws.send(frame, { binary: true }, () => done());
    },
  };
}

/** A binary WebSocket message as one Buffer, whatever ws's binaryType produced. */
export function binaryOf(data: Buffer | ArrayBuffer | Buffer[]): Buffer {
  if (Buffer.isBuffer(data)) return data;
  if (Array.isArray(data)) return Buffer.concat(data);
  return Buffer.from(data);
}

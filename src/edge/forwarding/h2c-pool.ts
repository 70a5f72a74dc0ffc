import { connect, type ClientHttp2Session, type ClientHttp2Stream, type OutgoingHttpHeaders } from 'node:http2';
import type { Duplex } from 'node:stream';

/**
 * HTTP/2 client sessions to the sandbox ports declared h2c (prior knowledge, RFC 9113 §3.3), pooled per
 * upstream: a sandbox's address and port, or one of its ports over this gateway's relay session. A
 * request takes a stream on a session with room for one more (fewer than the upstream's
 * SETTINGS_MAX_CONCURRENT_STREAMS and the pool's own cap), else a new session while the upstream has
 * fewer than its cap; past both it is refused at once (`H2cSaturated`), never queued, so what one
 * tenant's clients open is bounded per upstream and cannot take sessions or streams from another
 * tenant's sandboxes. A session with no stream for `idleMs` is closed (GOAWAY).
 */

export interface H2cLimits {
  /** HTTP/2 connections to one upstream. */
  readonly maxSessionsPerUpstream: number;
  /** Streams on one connection; the upstream's own SETTINGS_MAX_CONCURRENT_STREAMS wins when lower. */
  readonly maxStreamsPerSession: number;
  /** A connection without a stream for this long is closed. */
  readonly idleMs: number;
}

export const DEFAULT_H2C_LIMITS: H2cLimits = { maxSessionsPerUpstream: 4, maxStreamsPerSession: 100, idleMs: 30_000 };

/** Every session to an upstream is at its stream cap, and the upstream at its session cap. */
export class H2cSaturated extends Error {
  readonly code = 'H2C_SATURATED';
}

/** Opens the byte stream a session runs on (a TCP connection, a relay stream). */
export type OpenTransport = () => Promise<Duplex>;

interface Held {
  readonly ready: Promise<ClientHttp2Session>;
  session: ClientHttp2Session | undefined;
  streams: number;
  /** GOAWAY received or closing: no new streams. */
  done: boolean;
  idle: NodeJS.Timeout | undefined;
}

export class H2cPool {
  private readonly upstreams = new Map<string, Held[]>();
  private closed = false;
  private saturated = 0;

  constructor(private readonly limits: H2cLimits = DEFAULT_H2C_LIMITS) {}

  /** Sessions open or opening, over every upstream. */
  get sessions(): number {
    let n = 0;
    for (const list of this.upstreams.values()) n += list.length;
    return n;
  }

  /** Streams open or opening, over every session. */
  get streams(): number {
    let n = 0;
    for (const list of this.upstreams.values()) for (const h of list) n += h.streams;
    return n;
  }

  /** Requests refused with H2cSaturated since the pool was made. */
  get refused(): number {
    return this.saturated;
  }

  /**
   * Opens a stream to the upstream `key` (sessions reach it through `open`), held under the caps until it
   * closes. Rejects with H2cSaturated, with the transport's error, or with the session's.
   */
  async request(key: string, open: OpenTransport, headers: OutgoingHttpHeaders, endStream: boolean): Promise<ClientHttp2Stream> {
    if (this.closed) throw new Error('the HTTP/2 upstream pool is closed');
    const held = this.pick(key, open);
    held.streams++;
    if (held.idle !== undefined) clearTimeout(held.idle);
    held.idle = undefined;
    let stream: ClientHttp2Stream;
    try {
      const session = await held.ready;
      stream = session.request(headers, { endStream });
    } catch (err) {
      this.release(held);
      throw err;
    }
    stream.once('close', () => this.release(held));
    return stream;
  }

  private pick(key: string, open: OpenTransport): Held {
    let list = this.upstreams.get(key);
    if (list !== undefined) {
      for (const h of list) if (!h.done && h.streams < this.streamCap(h)) return h;
      if (list.length >= this.limits.maxSessionsPerUpstream) {
        this.saturated++;
        throw new H2cSaturated(`every HTTP/2 connection to this port carries its maximum of streams (${this.limits.maxSessionsPerUpstream} connections)`);
      }
    } else {
      list = [];
      this.upstreams.set(key, list);
    }
    const held: Held = { ready: undefined as unknown as Promise<ClientHttp2Session>, session: undefined, streams: 0, done: false, idle: undefined };
    (held as { ready: Promise<ClientHttp2Session> }).ready = this.connect(key, held, open);
    // Awaited by the request that made it; a failure is that request's, and the next one opens anew.
    held.ready.catch(() => this.forget(key, held));
    list.push(held);
    return held;
  }

  private streamCap(h: Held): number {
    const remote = h.session?.remoteSettings.maxConcurrentStreams;
    return remote === undefined ? this.limits.maxStreamsPerSession : Math.min(remote, this.limits.maxStreamsPerSession);
  }

  private async connect(key: string, held: Held, open: OpenTransport): Promise<ClientHttp2Session> {
    const transport = await open();
    return new Promise<ClientHttp2Session>((resolve, reject) => {
      // The authority is only the session's default :authority; every request names its own.
      const session = connect('http://sandbox', { createConnection: () => transport, settings: { enablePush: false } });
      held.session = session;
      const failed = (err: Error): void => reject(err);
      session.once('error', failed);
      // Errors after the handshake belong to the streams in flight (each gets its own 'error').
      session.on('error', ignore);
      session.once('connect', () => {
        session.off('error', failed);
        resolve(session);
      });
      session.once('goaway', () => (held.done = true));
      session.once('close', () => {
        held.done = true;
        this.forget(key, held);
        reject(new Error('the HTTP/2 connection to the sandbox closed'));
      });
      if (this.closed) session.destroy();
    });
  }

  private release(held: Held): void {
    held.streams--;
    if (held.streams > 0 || held.done || held.session === undefined) return;
    const session = held.session;
    held.idle = setTimeout(() => {
      held.done = true;
      session.close();
    }, this.limits.idleMs);
    held.idle.unref();
  }

  private forget(key: string, held: Held): void {
    if (held.idle !== undefined) clearTimeout(held.idle);
    const list = this.upstreams.get(key);
    if (list === undefined) return;
    const i = list.indexOf(held);
    if (i >= 0) list.splice(i, 1);
    if (list.length === 0) this.upstreams.delete(key);
  }

  /** Closes every session (streams in flight are cut). */
  close(): void {
    this.closed = true;
    for (const list of this.upstreams.values()) for (const h of list) h.session?.destroy();
    this.upstreams.clear();
  }
}

function ignore(): void {}

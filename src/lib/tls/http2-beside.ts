import type { Server } from 'node:http';
import { createServer, type Http2Server, type IncomingHttpHeaders, type ServerHttp2Session, type ServerHttp2Stream } from 'node:http2';
import type { Socket } from 'node:net';
import { Duplex } from 'node:stream';
import type { TLSSocket } from 'node:tls';
import { firstRequest } from '../connection-guard.js';
import type { ConnectionFront } from '../http-listen.js';

/**
 * HTTP/2 beside HTTP/1.1 on one TLS listener (an https.Server): a connection whose ALPN chose `h2`
 * becomes an HTTP/2 session whose streams go to `onStream`; any other goes on to the server's HTTP/1.1
 * handling as before. On a plain listener, priorKnowledge() does the same for a connection that opens with
 * HTTP/2's preface. Sessions are tracked so a graceful close can send GOAWAY and let streams in flight
 * finish (`closeIdle`), then cut what is left (`closeAll`) — the ConnectionFront contract closeGracefully
 * uses.
 */

export interface Http2Limits {
  /** Idle time after which a session is closed (GOAWAY). */
  readonly idleTimeoutMs: number;
  /** Concurrent streams a client may open on one connection (SETTINGS_MAX_CONCURRENT_STREAMS). */
  readonly maxConcurrentStreams: number;
  /** Largest request head, decoded (SETTINGS_MAX_HEADER_LIST_SIZE). */
  readonly maxHeaderListSize: number;
}

/** The ALPN protocols, in the server's order of preference. */
export const ALPN = ['h2', 'http/1.1'];

/** HTTP/2's client connection preface (RFC 9113 §3.4). */
const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

export class Http2Beside implements ConnectionFront {
  private readonly h2: Http2Server;
  private readonly sessions = new Set<ServerHttp2Session>();
  /** Client addresses of sessions run on a stream node:http2 wrapped (accept()), whose own address it does not know. */
  private readonly addresses = new WeakMap<ServerHttp2Session, string>();
  /** The address of the connection accept() is handing over (its session is made synchronously). */
  private accepting: string | undefined;
  /** The connection being handed to node:http2, whose session it makes synchronously. */
  private handing: Socket | undefined;
  /** Sessions that have not opened a stream yet, and their connection as the listener accepted it (a session's own `socket` is a proxy of it). */
  private readonly unasked = new WeakMap<ServerHttp2Session, Socket>();

  /** `server`: the TLS listener whose `h2` connections become sessions; undefined: only those given to accept(). */
  constructor(server: Server | undefined, onStream: (stream: ServerHttp2Stream, headers: IncomingHttpHeaders, clientIp: string) => void, limits: Http2Limits) {
    // RFC 8441: SETTINGS_ENABLE_CONNECT_PROTOCOL lets a client open a WebSocket as an extended CONNECT stream.
    this.h2 = createServer({
      settings: { enableConnectProtocol: true, maxConcurrentStreams: limits.maxConcurrentStreams, maxHeaderListSize: limits.maxHeaderListSize, enablePush: false },
    });
    this.h2.on('stream', (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => {
      // A client's RST_STREAM or a broken connection surfaces here; the stream's own 'close' does the rest.
      stream.on('error', ignore);
      const session = stream.session as ServerHttp2Session | undefined;
      const socket = session === undefined ? undefined : this.unasked.get(session);
      if (socket !== undefined) {
        // The first HEADERS: the listener's request-header timeout no longer applies (connection-guard.ts).
        this.unasked.delete(session!);
        firstRequest(socket);
      }
      onStream(stream, headers, this.addressOf(stream.session as ServerHttp2Session | undefined));
    });
    this.h2.on('session', (session: ServerHttp2Session) => {
      this.sessions.add(session);
      if (this.accepting !== undefined) this.addresses.set(session, this.accepting);
      if (this.handing !== undefined) this.unasked.set(session, this.handing);
      session.on('error', ignore);
      session.once('close', () => this.sessions.delete(session));
      session.setTimeout(limits.idleTimeoutMs, () => session.close());
    });
    if (server === undefined) return;
    const http1 = server.listeners('secureConnection');
    server.removeAllListeners('secureConnection');
    server.on('secureConnection', (socket: TLSSocket) => {
      if (socket.alpnProtocol === 'h2') this.handOver(socket, socket);
      else for (const l of http1) (l as (s: TLSSocket) => void).call(server, socket);
    });
  }

  /**
   * Serves `socket` as an HTTP/2 connection whose first bytes — the client's connection preface — were
   * read already and put back (`unshift`). node:http2 reads a net.Socket's handle directly, past bytes put
   * back, so the session runs on a Duplex that reads the socket as a stream (node:http2 wraps any such
   * stream itself).
   */
  accept(socket: Socket): void {
    this.accepting = socket.remoteAddress ?? '';
    try {
      this.handOver(readAgain(socket), socket);
    } finally {
      this.accepting = undefined;
    }
  }

  /** node:http2 makes a session of `stream`; `socket` is the listener's connection it runs over. */
  private handOver(stream: Duplex, socket: Socket): void {
    this.handing = socket;
    try {
      this.h2.emit('connection', stream);
    } finally {
      this.handing = undefined;
    }
  }

  /**
   * Takes over a plain http.Server's connections: one that opens with HTTP/2's connection preface (h2c
   * with prior knowledge, RFC 9113 §3.3) becomes a session, any other goes on to node:http as before,
   * its first bytes put back. A connection that has not told which within `timeoutMs` is closed.
   */
  priorKnowledge(server: Server, timeoutMs: number): void {
    const http1 = server.listeners('connection');
    server.removeAllListeners('connection');
    server.on('connection', (socket: Socket) => {
      let seen: Buffer = Buffer.alloc(0);
      const timer = setTimeout(() => socket.destroy(), timeoutMs);
      timer.unref();
      const cut = (): void => void socket.destroy();
      const decided = (h2: boolean): void => {
        clearTimeout(timer);
        socket.off('data', onData);
        socket.off('error', cut);
        socket.off('close', stop);
        socket.unshift(seen);
        if (h2) this.accept(socket);
        else for (const l of http1) (l as (s: Socket) => void).call(server, socket);
      };
      const onData = (chunk: Buffer): void => {
        seen = seen.length === 0 ? chunk : Buffer.concat([seen, chunk]);
        const n = Math.min(seen.length, PREFACE.length);
        if (seen.compare(PREFACE, 0, n, 0, n) !== 0) decided(false);
        else if (n === PREFACE.length) decided(true);
      };
      const stop = (): void => clearTimeout(timer);
      socket.on('data', onData);
      socket.on('error', cut);
      socket.once('close', stop);
    });
  }

  private addressOf(session: ServerHttp2Session | undefined): string {
    if (session === undefined) return '';
    return this.addresses.get(session) ?? session.socket?.remoteAddress ?? '';
  }

  /** Sessions open now. */
  get size(): number {
    return this.sessions.size;
  }

  /** GOAWAY to every session: no new streams, those in flight finish. */
  closeIdle(): void {
    for (const s of this.sessions) s.close();
  }

  closeAll(): void {
    for (const s of this.sessions) s.destroy();
  }
}

function ignore(): void {}

/** A Duplex over `socket`'s readable side (bytes put back included) and its writable side. */
function readAgain(socket: Socket): Duplex {
  const d = new Duplex({
    read: () => void socket.resume(),
    write: (chunk: Buffer, _enc, cb) => void socket.write(chunk, cb),
    final: (cb) => void socket.end(cb),
    destroy: (err, cb) => {
      socket.destroy(err ?? undefined);
      cb(err);
    },
  });
  socket.on('data', (chunk: Buffer) => {
    if (!d.push(chunk)) socket.pause();
  });
  socket.once('end', () => d.push(null));
  socket.once('error', (err) => d.destroy(err));
  socket.once('close', () => d.destroy());
  return d;
}

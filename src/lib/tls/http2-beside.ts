import type { Server } from 'node:http';
import { createServer, type Http2Server, type IncomingHttpHeaders, type ServerHttp2Session, type ServerHttp2Stream } from 'node:http2';
import type { TLSSocket } from 'node:tls';
import type { ConnectionFront } from '../http-listen.js';

/**
 * HTTP/2 beside HTTP/1.1 on one TLS listener (an https.Server): a connection whose ALPN chose `h2`
 * becomes an HTTP/2 session whose streams go to `onStream`; any other goes on to the server's HTTP/1.1
 * handling as before. Sessions are tracked so a graceful close can send GOAWAY and let streams in flight
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

export class Http2Beside implements ConnectionFront {
  private readonly h2: Http2Server;
  private readonly sessions = new Set<ServerHttp2Session>();

  constructor(server: Server, onStream: (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => void, limits: Http2Limits) {
    // RFC 8441: SETTINGS_ENABLE_CONNECT_PROTOCOL lets a client open a WebSocket as an extended CONNECT stream.
    this.h2 = createServer({
      settings: { enableConnectProtocol: true, maxConcurrentStreams: limits.maxConcurrentStreams, maxHeaderListSize: limits.maxHeaderListSize, enablePush: false },
    });
    this.h2.on('stream', (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => {
      // A client's RST_STREAM or a broken connection surfaces here; the stream's own 'close' does the rest.
      stream.on('error', ignore);
      onStream(stream, headers);
    });
    this.h2.on('session', (session: ServerHttp2Session) => {
      this.sessions.add(session);
      session.on('error', ignore);
      session.once('close', () => this.sessions.delete(session));
      session.setTimeout(limits.idleTimeoutMs, () => session.close());
    });
    const http1 = server.listeners('secureConnection');
    server.removeAllListeners('secureConnection');
    server.on('secureConnection', (socket: TLSSocket) => {
      if (socket.alpnProtocol === 'h2') this.h2.emit('connection', socket);
      else for (const l of http1) (l as (s: TLSSocket) => void).call(server, socket);
    });
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

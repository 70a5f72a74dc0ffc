import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo, Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { Server as TlsServer, type TlsOptions } from 'node:tls';
import { ERROR_CODES } from '../domain/errors.js';
import type { ConnectionGuard } from './connection-guard.js';
import type { RequestGuard } from './request-guard.js';

/**
 * Starting and stopping the gateway's HTTP listeners, one way for all of them (admin, proxy, relay,
 * supervisor): listen under the listener's connection guard (connection-guard.ts) and report the bound
 * port (port 0 picks a free one), and close gracefully — stop
 * accepting, close idle keep-alive connections at once, let requests in flight finish for up to
 * `graceMs`, then cut what is left.
 */

/** A TLS listener's server options, and the hook that keeps its default certificate current (a certificate store's attach). */
export interface ServerTls {
  readonly options: TlsOptions;
  attach(server: TlsServer): void;
}

/** Listens with `guard` installed (after every other listener of the server's events is registered). */
export function listenOn(server: Server, host: string, port: number, guard: ConnectionGuard): Promise<number> {
  guard.install(server, { tls: server instanceof TlsServer, http1: true });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve((server.address() as AddressInfo).port);
    });
  });
}

/** Connections a server's own front reads before (or instead of) node:http (edge/authz-front.ts). */
export interface ConnectionFront {
  closeIdle(): void;
  closeAll(): void;
}

export function closeGracefully(server: Server, graceMs: number, front?: ConnectionFront): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      server.closeAllConnections();
      front?.closeAll();
      resolve();
    }, graceMs);
    timer.unref();
    server.close(() => {
      clearTimeout(timer);
      resolve();
    });
    server.closeIdleConnections();
    front?.closeIdle();
  });
}

/**
 * An HTTP/1.1 server for proxied traffic (the embedded proxy, the relay listener): TCP_NODELAY, keep-alive
 * longer than common load balancers' idle timeouts, no overall request timeout (SSE and downloads are
 * legitimate long streams; idleness is policed per stream), upgrades handed to `onUpgrade`, and a bare
 * 400 (431 for a head past the limit, 408 for one too slow) for requests that do not even parse — or,
 * behind an answer still in flight, no answer: that one finishes and the connection closes. Handlers run
 * under `guard` (request-guard.ts): a throw ends its request, never the process. With `tls`, the same
 * server over TLS (an https.Server, whose connections start at 'secureConnection').
 */
export function createStreamingServer(
  onRequest: (req: IncomingMessage, res: ServerResponse) => void,
  onUpgrade: (req: IncomingMessage, socket: Socket, head: Buffer) => void,
  guard: RequestGuard,
  tls?: TlsOptions,
): Server {
  // Answers in flight per connection: a request that does not parse behind one must not be answered
  // ahead of it (the client would read that answer as the first request's).
  const open = new Map<Duplex, InFlight>();
  const handler = (req: IncomingMessage, res: ServerResponse): void => {
    const socket = req.socket;
    let f = open.get(socket);
    if (f === undefined) open.set(socket, (f = { answering: 0, req, res, broken: false }));
    f.answering++;
    f.req = req;
    f.res = res;
    const flight = f;
    res.once('close', () => {
      if (--flight.answering > 0) return;
      open.delete(socket);
      if (flight.broken) socket.end();
    });
    guard.run(req, res, () => onRequest(req, res));
  };
  const server: Server = tls === undefined ? createServer({ noDelay: true }, handler) : createHttpsServer({ ...tls, noDelay: true }, handler);
  server.keepAliveTimeout = 65_000;
  server.requestTimeout = 0;
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => guard.runUpgrade(req, socket, () => onUpgrade(req, socket as Socket, head)));
  refuseConnect(server, PROXIED_METHODS);
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
    const f = open.get(socket);
    if (f !== undefined && f.req.complete) {
      // A request after those being answered: they finish, then the connection closes, it unanswered.
      f.broken = true;
      return;
    }
    // A TLS socket whose handshake failed or timed out arrives here destroyed by its guard (connection-guard.ts).
    // The body of the request being answered broke: refused while nothing of its answer was sent, else cut.
    if (!socket.writable || (f !== undefined && f.res.headersSent)) return void socket.destroy();
    const status = err.code === 'HPE_HEADER_OVERFLOW' ? '431 Request Header Fields Too Large' : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? '408 Request Timeout' : '400 Bad Request';
    socket.end(`HTTP/1.1 ${status}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
  });
  return server;
}

/** A connection's requests being answered, and the latest of them (node:http reads ahead of its answers). */
interface InFlight {
  answering: number;
  req: IncomingMessage;
  res: ServerResponse;
  /** Bytes after `req` did not parse: close once the answers in flight are written. */
  broken: boolean;
}

/** The methods the embedded proxy and the relay listener carry (anything but CONNECT). */
export const PROXIED_METHODS = 'GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS';

/**
 * CONNECT (RFC 9110 §9.3.6) asks for a tunnel to an address the client names; no client-facing listener
 * offers one. Node hands CONNECT to a 'connect' listener and, without one, closes the socket with no
 * bytes: answer 405 `method_not_allowed` with the typed JSON body instead, and close.
 */
export function refuseConnect(server: Server, allow: string): void {
  server.on('connect', (_req: IncomingMessage, socket: Duplex) => {
    socket.on('error', () => socket.destroy());
    const body = JSON.stringify({ code: 'method_not_allowed', message: 'CONNECT is not supported: sandgate opens no tunnels' });
    const status = ERROR_CODES.method_not_allowed.status;
    socket.end(
      `HTTP/1.1 ${status} Method Not Allowed\r\ncontent-type: application/json\r\nx-sandgate-error: method_not_allowed\r\nallow: ${allow}\r\n` +
        `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
    );
  });
}

import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { ERROR_CODES } from '../domain/errors.js';

/**
 * Starting and stopping the gateway's HTTP listeners, one way for all of them (admin, proxy, relay,
 * supervisor): listen and report the bound port (port 0 picks a free one), and close gracefully — stop
 * accepting, close idle keep-alive connections at once, let requests in flight finish for up to
 * `graceMs`, then cut what is left.
 */

export function listenOn(server: Server, host: string, port: number): Promise<number> {
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
 * legitimate long streams; idleness is policed per stream), upgrades handed to `onUpgrade`, and a bare 400
 * for requests that do not even parse.
 */
export function createStreamingServer(
  onRequest: (req: IncomingMessage, res: ServerResponse) => void,
  onUpgrade: (req: IncomingMessage, socket: Socket, head: Buffer) => void,
): Server {
  const server = createServer({ noDelay: true }, onRequest);
  server.keepAliveTimeout = 65_000;
  server.requestTimeout = 0;
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => onUpgrade(req, socket as Socket, head));
  refuseConnect(server, PROXIED_METHODS);
  server.on('clientError', (_err, socket) => {
    if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
    else socket.destroy();
  });
  return server;
}

/** The methods the embedded proxy and the relay listener carry (anything but CONNECT). */
export const PROXIED_METHODS = 'GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS';

/**
 * CONNECT (RFC 9110 §9.3.6) asks for a tunnel to an address the client names; no sandgate listener
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

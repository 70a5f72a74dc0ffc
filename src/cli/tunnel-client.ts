import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Duplex } from 'node:stream';
import WebSocket, { createWebSocketStream } from 'ws';

/**
 * The client side of a TCP tunnel through sandgate's embedded proxy (docs/tunnels.md): `CONNECT
 * <name>.<namespace>.<base-domain>:<port>` to the gateway's data-plane URL, the credential in
 * `Proxy-Authorization: Bearer`. Resolves with the connection once the gateway answered 200; a refusal
 * rejects with the gateway's typed code and message.
 */

export interface TunnelTarget {
  readonly namespace: string;
  readonly name: string;
  readonly port: number;
}

export interface TunnelClientOptions {
  /** The proxy's URL, `http://…` or `https://…`. */
  readonly gateway: URL;
  readonly baseDomain: string;
  /** An API key or the sandbox's traffic token. */
  readonly credential: string | undefined;
  /** The header an API key travels in on the WebSocket tunnel (`--api-key-header`). */
  readonly apiKeyHeader: string;
}

/** The tunnel was refused: its status and typed code, said in one line. `typed`: sandgate itself refused. */
export class TunnelRefusedError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    detail: string,
    readonly typed: boolean,
  ) {
    super(`tunnel refused: ${status} ${code}: ${detail}`);
  }
}

/**
 * Opens a tunnel: CONNECT where it passes; the WebSocket tunnel when something between the client and the
 * gateway does not carry CONNECT (an answer that is not sandgate's own, or a connection cut). A refusal by
 * sandgate is final either way.
 */
export async function openTunnel(t: TunnelTarget, o: TunnelClientOptions, via: 'auto' | 'connect' | 'websocket' = 'auto'): Promise<Duplex> {
  if (via === 'websocket') return websocketTunnel(t, o);
  try {
    return await connectTunnel(t, o);
  } catch (err) {
    if (via === 'connect' || (err instanceof TunnelRefusedError && err.typed)) throw err;
    return websocketTunnel(t, o);
  }
}

/** Opens the WebSocket tunnel (`GET /v1/sandboxes/{namespace}/{name}/ports/{port}/tunnel`); binary messages carry the bytes. */
export function websocketTunnel(t: TunnelTarget, o: TunnelClientOptions): Promise<Duplex> {
  const url = new URL(`/v1/sandboxes/${t.namespace}/${t.name}/ports/${t.port}/tunnel`, o.gateway);
  url.protocol = o.gateway.protocol === 'https:' ? 'wss:' : 'ws:';
  // Proxy-Authorization is a hop's own header (an HTTP proxy on the way takes it): the key goes in its header.
  const headers = o.credential === undefined ? {} : { [o.apiKeyHeader]: o.credential };
  const ws = new WebSocket(url, { headers, perMessageDeflate: false });
  return new Promise<Duplex>((resolve, reject) => {
    ws.once('open', () => {
      ws.off('error', reject);
      resolve(createWebSocketStream(ws));
    });
    ws.once('unexpected-response', (_req, res: IncomingMessage) => rejectWithRefusal(res, reject));
    ws.once('error', reject);
  });
}

/** Longest refusal body read: the gateway's typed JSON answers are far shorter. */
const MAX_REFUSAL_BYTES = 16 * 1024;

/** Reads a refusal answered as an ordinary response (its first 16 KiB) and rejects with it. */
function rejectWithRefusal(res: IncomingMessage, reject: (err: Error) => void): void {
  const chunks: Buffer[] = [];
  let size = 0;
  res.on('data', (c: Buffer) => {
    if ((size += c.length) <= MAX_REFUSAL_BYTES) chunks.push(c);
  });
  res.once('end', () => reject(refusal(res.statusCode ?? 0, res.headers['x-sandgate-error'], Buffer.concat(chunks))));
  res.once('error', reject);
}

export function tunnelAuthority(t: TunnelTarget, baseDomain: string): string {
  return `${t.name}.${t.namespace}.${baseDomain}:${t.port}`;
}

/** Opens a tunnel with CONNECT. */
export function connectTunnel(t: TunnelTarget, o: TunnelClientOptions): Promise<Duplex> {
  const authority = tunnelAuthority(t, o.baseDomain);
  const secure = o.gateway.protocol === 'https:';
  const request = secure ? httpsRequest : httpRequest;
  return new Promise<Duplex>((resolve, reject) => {
    const req = request({
      host: o.gateway.hostname.replace(/^\[|\]$/g, ''),
      port: o.gateway.port === '' ? (secure ? 443 : 80) : Number(o.gateway.port),
      method: 'CONNECT',
      path: authority,
      headers: { host: authority, ...(o.credential === undefined ? {} : { 'proxy-authorization': `Bearer ${o.credential}` }) },
      servername: secure ? o.gateway.hostname : undefined,
    });
    req.once('connect', (res: IncomingMessage, socket: Duplex, head: Buffer) => {
      if (res.statusCode === 200) {
        if (head.length > 0) socket.unshift(head);
        return resolve(socket);
      }
      // The refusal's body follows the head on the same connection.
      readRefusal(socket, head, res, reject);
    });
    // A refusal answered as an ordinary response (a gateway or proxy that does not serve CONNECT).
    req.once('response', (res: IncomingMessage) => rejectWithRefusal(res, reject));
    req.once('error', reject);
    req.end();
  });
}

function readRefusal(socket: Duplex, head: Buffer, res: IncomingMessage, reject: (err: Error) => void): void {
  const chunks: Buffer[] = [head];
  let size = head.length;
  const done = (): void => {
    socket.destroy();
    reject(refusal(res.statusCode ?? 0, res.headers['x-sandgate-error'], Buffer.concat(chunks)));
  };
  socket.on('data', (c: Buffer) => {
    if ((size += c.length) <= MAX_REFUSAL_BYTES) chunks.push(c);
    else done();
  });
  socket.once('end', done);
  socket.once('error', done);
}

function refusal(status: number, header: string | string[] | undefined, body: Buffer): TunnelRefusedError {
  let code = typeof header === 'string' ? header : 'refused';
  let message = body.toString('utf8').trim().split('\n')[0] ?? '';
  try {
    const j = JSON.parse(body.toString('utf8')) as { code?: unknown; message?: unknown };
    if (typeof j.code === 'string') code = j.code;
    if (typeof j.message === 'string') message = j.message;
  } catch {
    // Not the gateway's JSON: the first line of whatever answered.
  }
  return new TunnelRefusedError(status, code, message || 'no reason given', typeof header === 'string');
}

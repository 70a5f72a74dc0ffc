import type { IncomingMessage } from 'node:http';
import type { Readable } from 'node:stream';

/**
 * The client's side of a forwarded request, as the proxy and the relay listener carry it: read by
 * node:http, by the proxy port's own front (proxy/proxy-front.ts, bodyless requests only), whose
 * response writes the same bytes node:http's would without its objects, or by node:http2 on the TLS port
 * (forwarding/h2-request.ts).
 */

/** A request body: node:http's IncomingMessage, or an HTTP/2 stream's readable side. */
export interface RequestBody extends Readable {
  /** The whole body has arrived. */
  readonly complete: boolean;
}

/** A client's request. */
export interface ClientRequest {
  readonly method: string;
  /** The request target as sent. */
  readonly url: string;
  /** Lower-case names. */
  readonly headers: Readonly<Record<string, string | undefined>>;
  /** Name, value, name, value… as sent. */
  readonly rawHeaders: readonly string[];
  readonly clientIp: string;
  /** The body, streamed on as it arrives; null when the request has none. */
  readonly body: RequestBody | null;
  /** Arrived over TLS (X-Forwarded-Proto: https). */
  readonly secure?: boolean;
}

/** What the forwarding code writes a response into: node:http's ServerResponse has this shape, and so has the front's. */
export interface ClientResponse {
  readonly headersSent: boolean;
  readonly destroyed: boolean;
  readonly writableFinished: boolean;
  writeHead(status: number, headers: string[]): unknown;
  /** False when the client is not keeping up: wait for 'drain'. */
  write(chunk: Buffer): boolean;
  end(body?: string): unknown;
  /** Sends the head now (Server-Sent Events), not with the first body bytes. */
  flushHeaders(): void;
  destroy(): unknown;
  on(event: 'close', fn: () => void): unknown;
  once(event: 'close' | 'drain', fn: () => void): unknown;
}

/** A request node:http read, as the forwarding code reads it. */
export function fromNodeHttp(req: IncomingMessage, secure?: boolean): ClientRequest {
  const h = req.headers;
  const hasBody = h['transfer-encoding'] !== undefined || (h['content-length'] !== undefined && h['content-length'] !== '0');
  return { method: req.method ?? 'GET', url: req.url ?? '/', headers: h as ClientRequest['headers'], rawHeaders: req.rawHeaders, clientIp: req.socket.remoteAddress ?? '', body: hasBody ? req : null, secure };
}

import { constants, type IncomingHttpHeaders, type OutgoingHttpHeaders, type ServerHttp2Stream } from 'node:http2';
import { Readable } from 'node:stream';
import type { ClientRequest, ClientResponse, RequestBody } from './client-side.js';
import { forwardResponseHeadersH2 } from './forward-headers.js';

/**
 * An HTTP/2 request (on the proxy's TLS port or h2c on its plain one, or from Envoy at the relay listener)
 * as the forwarding code carries it, and its response: the same ClientRequest / ClientResponse the
 * HTTP/1.1 doors use, so routing, tenancy, header rules, streaming and denials are one code path. Toward
 * an HTTP/1.1 port, `:authority` becomes its Host (RFC 9113 §8.3.1), the pseudo-headers go, `cookie`
 * crumbs are joined with `; ` (§8.2.3), and the response's hop-by-hop headers were already dropped
 * (HTTP/2 forbids them, §8.2.2).
 */

/** The request header names carried as the request's headers: every field but the pseudo-headers and Host. */
function fields(headers: IncomingHttpHeaders, authority: string | undefined): { map: Record<string, string | undefined>; raw: string[] } {
  const map: Record<string, string | undefined> = {};
  const raw: string[] = [];
  if (authority !== undefined) {
    map.host = authority;
    raw.push('host', authority);
  }
  for (const name in headers) {
    // node:http2 joins cookie crumbs with '; ' and lists a repeated field as an array.
    if (name.charCodeAt(0) === 0x3a || name === 'host') continue;
    const v = headers[name];
    if (v === undefined) continue;
    if (Array.isArray(v)) {
      for (const one of v) raw.push(name, one);
      map[name] = v.join(', ');
    } else {
      raw.push(name, v);
      map[name] = v;
    }
  }
  return { map, raw };
}

/** The request as the proxy carries it; `:authority` wins over a Host field (they must agree; the proxy routes on one). */
export function h2Request(stream: ServerHttp2Stream, headers: IncomingHttpHeaders, clientIp: string, secure = true): ClientRequest {
  const authority = headers[':authority'] ?? headers.host;
  const { map, raw } = fields(headers, authority);
  return {
    method: headers[':method'] ?? 'GET',
    url: headers[':path'] ?? '',
    headers: map,
    rawHeaders: raw,
    clientIp,
    body: stream.endAfterHeaders ? null : new H2Body(stream),
    secure,
  };
}

/**
 * The stream's readable side as a request body. A stream of its own: the forwarding code destroys a body
 * once sent (undici does), which must not reset the HTTP/2 stream the response still goes out on. A
 * Readable fed from the stream's events, with the stream paused while this one's buffer is full — not a
 * PassThrough piped to, whose writable half and pipe machinery cost more per request than they carry.
 */
class H2Body extends Readable implements RequestBody {
  constructor(private readonly stream: ServerHttp2Stream) {
    super();
    stream.on('data', (chunk: Buffer) => {
      if (!this.destroyed && !this.push(chunk)) stream.pause();
    });
    stream.once('end', () => this.push(null));
    stream.once('aborted', () => this.destroy(new Error('the HTTP/2 stream was reset before its body ended')));
    // A body may have no reader (a bodyless GET, an RFC 8441 WebSocket): its reset must not become an
    // uncaught 'error' that ends the process. A reader's own listener still gets the error.
    this.on('error', ignore);
  }

  override _read(): void {
    this.stream.resume();
  }

  override _destroy(err: Error | null, callback: (error?: Error | null) => void): void {
    // What the client still sends is read and dropped, not left in its flow-control window.
    this.stream.resume();
    callback(err);
  }

  get complete(): boolean {
    return this.stream.readableEnded;
  }
}

/** Response fields HTTP/2 refuses (RFC 9113 §8.2.2) that a response list may still name. */
const NOT_IN_H2 = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'http2-settings']);

/** A response head list (name, value, …) as an HTTP/2 header object: repeated names as arrays, names in lower case. */
export function h2ResponseHeaders(status: number, list: readonly string[]): OutgoingHttpHeaders {
  // No prototype: a field named `constructor` or `__proto__` is a field like any other.
  const out: OutgoingHttpHeaders = Object.create(null) as OutgoingHttpHeaders;
  out[':status'] = status;
  for (let i = 0; i < list.length; i += 2) {
    const name = list[i]!.toLowerCase();
    if (NOT_IN_H2.has(name)) continue;
    const value = list[i + 1]!;
    const had = out[name];
    if (had === undefined) out[name] = value;
    else if (Array.isArray(had)) had.push(value);
    else out[name] = [String(had), value];
  }
  return out;
}

/** A response written onto an HTTP/2 stream; the head goes out with writeHead (HTTP/2 has no framing to settle). */
export class H2Response implements ClientResponse {
  /** Set by addTrailers: sent after the body of a response begun with writeHeadForTrailers. */
  private trailers: OutgoingHttpHeaders | undefined;

  constructor(private readonly stream: ServerHttp2Stream) {}

  /**
   * The head of a response that may end with trailers (an h2c sandbox's; gRPC's grpc-status): the body's
   * last DATA frame leaves the stream open for a HEADERS frame with END_STREAM, the trailers added by
   * then (none: an empty one). `endStream`: the head is the whole response (gRPC's trailers-only form).
   */
  writeHeadForTrailers(status: number, headers: string[], endStream: boolean): void {
    if (this.stream.destroyed || this.stream.headersSent) return;
    if (endStream) return this.stream.respond(h2ResponseHeaders(status, headers), { endStream: true });
    this.stream.respond(h2ResponseHeaders(status, headers), { waitForTrailers: true });
    this.stream.once('wantTrailers', () => this.stream.sendTrailers(this.trailers ?? {}));
  }

  addTrailers(trailers: OutgoingHttpHeaders): void {
    this.trailers = trailers;
  }

  /** Reset with the upstream's own RST_STREAM code (CANCEL stays CANCEL for a gRPC client). */
  reset(code: number): void {
    if (!this.stream.destroyed) this.stream.close(code);
  }

  get headersSent(): boolean {
    return this.stream.headersSent;
  }

  get destroyed(): boolean {
    return this.stream.destroyed;
  }

  get writableFinished(): boolean {
    return this.stream.writableFinished;
  }

  writeHead(status: number, headers: string[]): this {
    if (!this.stream.destroyed && !this.stream.headersSent) this.stream.respond(h2ResponseHeaders(status, headers));
    return this;
  }

  /** An upstream's response head, from its raw list to the stream's header object in one pass (forwardResponseHeadersH2). */
  writeUpstreamHead(status: number, raw: readonly (string | Buffer)[]): void {
    if (!this.stream.destroyed && !this.stream.headersSent) this.stream.respond(forwardResponseHeadersH2(status, raw));
  }

  write(chunk: Buffer): boolean {
    // A HEAD, 204 or 304 response ended its stream with its head (node:http2 sets END_STREAM).
    if (this.stream.writableEnded || this.stream.destroyed) return true;
    return this.stream.write(chunk);
  }

  end(body?: string): this {
    if (this.stream.writableEnded || this.stream.destroyed) return this;
    if (body !== undefined && body.length > 0) this.stream.end(body);
    else this.stream.end();
    return this;
  }

  flushHeaders(): void {
    // Sent by writeHead already.
  }

  /** Reset mid-response: the client sees the stream fail (RST_STREAM INTERNAL_ERROR), not a truncated success. */
  destroy(): this {
    if (!this.stream.destroyed) this.stream.close(constants.NGHTTP2_INTERNAL_ERROR);
    return this;
  }

  on(event: 'close', fn: () => void): this {
    this.stream.on(event, fn);
    return this;
  }

  once(event: 'close' | 'drain', fn: () => void): this {
    this.stream.once(event, fn);
    return this;
  }
}

function ignore(): void {}

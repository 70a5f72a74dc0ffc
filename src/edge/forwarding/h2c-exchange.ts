import { constants, type ClientHttp2Stream, type IncomingHttpHeaders, type OutgoingHttpHeaders } from 'node:http2';
import type { RequestGuard } from '../../lib/request-guard.js';
import type { Exchange } from '../../observability/exchange.js';
import type { ClientRequest, ClientResponse } from './client-side.js';
import { HOP_BY_HOP, isSandgateSetCookie } from './forward-headers.js';
import type { H2cPool, OpenTransport } from './h2c-pool.js';
import { InvalidUpstreamResponse, isFinalStatus } from './upstream-answer.js';
import { H2Response } from './h2-request.js';

/**
 * One request to a sandbox port declared h2c, carried over HTTP/2 end to end: a stream on a pooled
 * session (forwarding/h2c-pool.ts), the request body streamed on with backpressure, the response head,
 * body and trailers passed back as they arrive. So a gRPC call reaches a gRPC server in the sandbox:
 * `grpc-timeout` travels as a header (the server enforces the deadline), `grpc-status` and
 * `grpc-message` come back as trailers (or in a trailers-only head, whose END_STREAM is kept), and a
 * client that cancels (RST_STREAM, or a closed HTTP/1.1 connection) cancels the upstream stream.
 *
 * An HTTP/2 client gets the trailers as trailers; an HTTP/1.1 client as chunked trailer fields, which
 * node:http writes when the response is chunked. A gRPC request (`content-type: application/grpc…`)
 * waits for its answer under its own deadline, not `--proxy-headers-timeout-ms` and the idle timeout:
 * a server stream may rightly stay silent for longer.
 */

export interface H2cExchangeOptions {
  /** From the request's last byte sent to the response head (not for gRPC); past it 504 upstream_timeout. */
  readonly headersTimeoutMs: number;
  /** Silence on the stream either way (not for gRPC); past it both sides are closed. */
  readonly idleTimeoutMs: number;
  readonly guard: RequestGuard;
}

/** What the exchange tells the proxy. */
export interface H2cHooks {
  /** The upstream failed before any response byte reached the client: answer the typed denial. */
  fail(err: unknown): void;
  /** A response body chunk after the first: the stream is still in use (activity). */
  streamed?(): void;
  readonly record?: Exchange | undefined;
}

export function isGrpc(contentType: string | undefined): boolean {
  return contentType !== undefined && contentType.startsWith('application/grpc');
}

/** Fields HTTP/2 refuses in a request or response (RFC 9113 §8.2.2); `te: trailers` is set apart. */
const NOT_IN_H2: ReadonlySet<string> = new Set([...HOP_BY_HOP, 'host', 'http2-settings']);

/**
 * The forwarded header list (name, value, …; already filtered: hop-by-hop, credentials and routing
 * headers gone) as an HTTP/2 request head: Host becomes `:authority` (RFC 9113 §8.3.1), names go lower
 * case, `te: trailers` is sent when the client asked for trailers (gRPC requires it).
 */
export function h2cRequestHeaders(method: string, path: string, list: readonly string[], trailers: boolean): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = { ':method': method, ':scheme': 'http', ':path': path };
  for (let i = 0; i < list.length; i += 2) {
    const name = list[i]!.toLowerCase();
    const value = list[i + 1]!;
    if (name === 'host') {
      out[':authority'] = value;
      continue;
    }
    if (NOT_IN_H2.has(name)) continue;
    const had = out[name];
    if (had === undefined) out[name] = value;
    else if (name === 'cookie') out[name] = `${String(had)}; ${value}`;
    else if (Array.isArray(had)) had.push(value);
    else out[name] = [String(had), value];
  }
  if (trailers) out.te = 'trailers';
  return out;
}

/**
 * An HTTP/2 response head as the flat list writeHead takes, pseudo-headers, hop-by-hop fields and a
 * `Set-Cookie` of sandgate's cookie left out.
 */
function fieldList(headers: IncomingHttpHeaders): string[] {
  const out: string[] = [];
  for (const name in headers) {
    if (name.charCodeAt(0) === 0x3a || NOT_IN_H2.has(name)) continue;
    const v = headers[name];
    if (v === undefined) continue;
    if (Array.isArray(v)) {
      for (const one of v) if (!isSandgateSetCookie(name, one)) out.push(name, one);
    } else {
      const one = String(v);
      if (!isSandgateSetCookie(name, one)) out.push(name, one);
    }
  }
  return out;
}

function trailerFields(headers: IncomingHttpHeaders): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const name in headers) {
    if (name.charCodeAt(0) === 0x3a || NOT_IN_H2.has(name)) continue;
    const v = headers[name];
    if (v !== undefined) out[name] = v;
  }
  return out;
}

function timeoutError(message: string): Error {
  return Object.assign(new Error(message), { code: 'ETIMEDOUT' });
}

/** node:http's ServerResponse writes trailers on a chunked response; the proxy front's bodyless answers have none. */
type WithTrailers = ClientResponse & { addTrailers?: (t: OutgoingHttpHeaders) => void };

/**
 * Sends `req` (the given path and filtered headers, its body) on a stream to the upstream `key` and
 * streams the answer into `res`. Before the response head, a failure goes to `hooks.fail` (the pool is
 * saturated, the sandbox refused, spoke something other than HTTP/2, or reset the stream); after it,
 * the client's stream is reset (an HTTP/2 client gets the upstream's RST_STREAM code) or its
 * connection cut, so it never takes a broken response for a whole one.
 */
export function h2cExchange(pool: H2cPool, key: string, open: OpenTransport, req: ClientRequest, res: ClientResponse, path: string, headers: readonly string[], o: H2cExchangeOptions, hooks: H2cHooks): void {
  const grpc = isGrpc(req.headers['content-type']);
  const trailers = grpc || (req.headers.te?.includes('trailers') ?? false);
  const head = h2cRequestHeaders(req.method, path, headers, trailers);
  const x = hooks.record;
  let upstream: ClientHttp2Stream | undefined;
  let answered = false;
  let failed = false;
  /** The upstream's whole answer arrived. */
  let complete = false;
  if (x !== undefined) res.once('close', () => x.responseClosed(res));
  // Not writableFinished: node:http2 reports a stream reset by its client as finished.
  res.on('close', () => {
    if (!complete) upstream?.close(constants.NGHTTP2_CANCEL);
    // A body still arriving has nowhere to go.
    if (upstream === undefined && req.body !== null && !req.body.complete) req.body.destroy();
  });
  const guard = o.guard;
  const fail = (err: unknown): void => {
    if (failed) return;
    failed = true;
    if (res.headersSent) return void (res instanceof H2Response && upstream !== undefined && upstream.rstCode !== undefined && upstream.rstCode !== constants.NGHTTP2_NO_ERROR ? res.reset(upstream.rstCode) : res.destroy());
    if (!res.destroyed) hooks.fail(err);
  };
  pool.request(key, open, head, req.body === null).then(
    guard.bind(req, res, (s: ClientHttp2Stream) => {
      upstream = s;
      if (res.destroyed) return void s.close(constants.NGHTTP2_CANCEL);
      carry(s);
    }),
    guard.bind(req, res, (err: unknown) => {
      if (req.body !== null && !req.body.complete) req.body.destroy();
      fail(err);
    }),
  );

  const carry = (s: ClientHttp2Stream): void => {
    let headTimer: NodeJS.Timeout | undefined;
    let chunks = 0;
    const onData = guard.bind(req, res, (chunk: Buffer) => {
      if (x !== undefined) x.bytesOut += chunk.length;
      if (++chunks > 1) hooks.streamed?.();
      if (res.write(chunk)) return;
      s.pause();
      res.once('drain', () => s.resume());
    });
    s.on('error', guard.bind(req, res, (err: Error) => fail(err)));
    if (!grpc) {
      s.once('finish', () => {
        if (answered || failed) return;
        headTimer = setTimeout(() => {
          fail(timeoutError('the sandbox did not answer in time'));
          s.close(constants.NGHTTP2_CANCEL);
        }, o.headersTimeoutMs);
        headTimer.unref();
      });
      s.setTimeout(o.idleTimeoutMs, () => {
        fail(timeoutError('the stream to the sandbox was idle too long'));
        s.close(constants.NGHTTP2_CANCEL);
      });
    }
    s.on(
      'response',
      guard.bind(req, res, (h: IncomingHttpHeaders, flags: number) => {
        clearTimeout(headTimer);
        const status = Number(h[':status']);
        if (!isFinalStatus(status)) {
          fail(new InvalidUpstreamResponse(`status ${status}`));
          return void s.close(constants.NGHTTP2_PROTOCOL_ERROR);
        }
        if (res.destroyed) return;
        answered = true;
        const end = (flags & constants.NGHTTP2_FLAG_END_STREAM) !== 0;
        const list = fieldList(h);
        complete = end;
        if (res instanceof H2Response) res.writeHeadForTrailers(status, list, end);
        else {
          res.writeHead(status, list);
          if (end) res.end();
        }
        x?.answered(status);
        // Read from here on, not before: node:http2 may emit body bytes that came with the head before 'response'.
        s.on('data', onData);
      }),
    );
    s.on(
      'trailers',
      guard.bind(req, res, (t: IncomingHttpHeaders) => {
        const fields = trailerFields(t);
        if (res instanceof H2Response) res.addTrailers(fields);
        else (res as WithTrailers).addTrailers?.(fields);
      }),
    );
    s.once('end', () => {
      complete = true;
      if (answered) res.end();
    });
    s.once('close', () => {
      clearTimeout(headTimer);
      if (res.writableFinished || res.destroyed) return;
      if (!answered) return fail(new Error(`the sandbox reset the HTTP/2 stream (code ${s.rstCode})`));
      if (s.rstCode !== undefined && s.rstCode !== constants.NGHTTP2_NO_ERROR) fail(new Error(`the sandbox reset the HTTP/2 stream (code ${s.rstCode})`));
    });
    if (req.body !== null) {
      req.body.pipe(s);
      if (x !== undefined) req.body.on('data', (chunk: Buffer) => (x.bytesIn += chunk.length));
    }
  };
}

import { request as httpRequest } from 'node:http';
import type { Socket } from 'node:net';
import { deny, type Deny, type RouteEntry } from '../../domain/decide.js';
import type { ClientRequest, ClientResponse } from '../forwarding/client-side.js';
import { forwardFailure } from '../forwarding/failure-codes.js';
import { forwardResponseHeaders } from '../forwarding/forward-headers.js';
import type { Connect, Pipe } from '../forwarding/websocket-tunnel.js';
import type { Exchange } from '../../observability/exchange.js';

/**
 * One HTTP/1.1 request carried over a relay stream: Node's HTTP client writes the request onto the
 * stream (it accepts any Duplex as its connection) and parses the sandbox's response off it, which is
 * streamed back to the client as it arrives. One request per stream, `Connection: close` toward the
 * sandbox: a stream is cheap, and an idle pooled stream would hold a place under the relay caps.
 */

export interface ExchangeTimeouts {
  /** From the stream opening to the response head; past it 504 upstream_timeout. */
  readonly headersTimeoutMs: number;
  /** Silence on the stream either way; past it both sides are closed. */
  readonly idleTimeoutMs: number;
}

/** The denial for a relay failure; `relay_busy` is worth retrying soon. */
export function relayDenial(err: unknown, entry?: RouteEntry): Deny {
  const code = forwardFailure('relay_stream', err);
  return deny(code, undefined, entry, code === 'relay_busy' ? 1 : undefined);
}

/** `upstream_host` in the exchange record of a request carried over a relay stream of this gateway's session. */
export function relayStreamHost(namespace: string, name: string, port: number): string {
  return `relay:${namespace}/${name}:${port}`;
}

function timeoutError(message: string): Error {
  return Object.assign(new Error(message), { code: 'ETIMEDOUT' });
}

/**
 * Sends `req` (its method, the given path and already-filtered headers, and its body) over the stream
 * `open` provides and streams the response to `res`. `fail` gets the error when nothing was sent to the
 * client yet; after the response head, a failure destroys the client connection so it sees a broken
 * response rather than a silently short one. A client that leaves aborts the stream (RESET), which the
 * supervisor turns into a TCP reset toward the sandbox.
 */
export function exchange(req: ClientRequest, res: ClientResponse, path: string, headers: readonly string[], open: Connect, t: ExchangeTimeouts, fail: (err: unknown) => void, x?: Exchange): void {
  const ac = new AbortController();
  let headTimer: NodeJS.Timeout | undefined;
  const out = [...headers];
  const chunked = req.headers['transfer-encoding'] !== undefined;
  // Transfer-Encoding is hop-by-hop and was filtered out: say again how this hop's body is framed.
  if (chunked && req.headers['content-length'] === undefined) out.push('transfer-encoding', 'chunked');
  const creq = httpRequest({
    method: req.method,
    path,
    headers: out as unknown as Record<string, string>,
    createConnection: ((_opts: unknown, created: (err: Error | null, sock?: Socket) => void) => {
      open(ac.signal).then(
        (pipe: Pipe) => {
          pipe.setTimeout(t.idleTimeoutMs, () => {
            creq.destroy(timeoutError('the relayed connection was idle too long'));
            res.destroy();
          });
          headTimer = setTimeout(() => creq.destroy(timeoutError('the sandbox did not answer in time')), t.headersTimeoutMs);
          headTimer.unref();
          created(null, pipe as unknown as Socket);
        },
        (err: Error) => created(err),
      );
      return undefined;
    }) as never,
  });
  if (x !== undefined) res.once('close', () => x.responseClosed(res));
  res.once('close', () => {
    if (res.writableFinished) return;
    ac.abort();
    creq.destroy();
  });
  creq.on('error', (err) => {
    clearTimeout(headTimer);
    if (res.headersSent) return void res.destroy();
    if (ac.signal.aborted || res.destroyed) return;
    fail(err);
  });
  creq.on('response', (ures) => {
    clearTimeout(headTimer);
    if (res.destroyed) return void creq.destroy();
    res.writeHead(ures.statusCode ?? 502, forwardResponseHeaders(ures.rawHeaders));
    if (x !== undefined) {
      x.answered(ures.statusCode ?? 502);
      ures.on('data', (chunk: Buffer) => (x.bytesOut += chunk.length));
    }
    // Server-Sent Events: send the head now, do not wait for the first event.
    if (ures.headers['content-type']?.startsWith('text/event-stream') === true) res.flushHeaders();
    ures.on('data', (chunk: Buffer) => {
      if (res.write(chunk)) return;
      ures.pause();
      res.once('drain', () => ures.resume());
    });
    ures.once('end', () => res.end());
    ures.once('close', () => {
      if (!ures.complete) res.destroy();
    });
  });
  if (req.body === null) creq.end();
  else {
    req.body.pipe(creq);
    // Counted behind pipe(), which already reads the body: a listener added first would start the flow early.
    if (x !== undefined) req.body.on('data', (chunk: Buffer) => (x.bytesIn += chunk.length));
  }
}

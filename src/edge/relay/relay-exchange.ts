import { request as httpRequest, type IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { RequestGuard } from '../../lib/request-guard.js';
import { deny, type Deny, type RouteEntry } from '../../domain/decide.js';
import type { ClientRequest, ClientResponse } from '../forwarding/client-side.js';
import { forwardFailure } from '../forwarding/failure-codes.js';
import { forwardResponseHeaders } from '../forwarding/forward-headers.js';
import { InvalidUpstreamResponse, isFinalStatus } from '../forwarding/upstream-answer.js';
import type { Connect, Pipe } from '../forwarding/websocket-tunnel.js';
import type { Exchange } from '../../observability/exchange.js';

/**
 * One HTTP/1.1 request carried over a relay stream: Node's HTTP client writes the request onto the
 * stream (it accepts any Duplex as its connection) and parses the sandbox's response off it, which is
 * streamed back to the client as it arrives. One request per stream, `Connection: close` toward the
 * sandbox: a stream is cheap, and an idle pooled stream would hold a place under the relay caps.
 */

export interface ExchangeOptions {
  /** From the request's last byte sent to the response head; past it 504 upstream_timeout. */
  readonly headersTimeoutMs: number;
  /** Silence on the stream either way; past it both sides are closed. */
  readonly idleTimeoutMs: number;
  /** The listener's last line: a throw in the exchange's event listeners ends this request only. */
  readonly guard: RequestGuard;
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
 * client yet — also when the sandbox's answer is not a valid HTTP response for the request
 * (forwarding/upstream-answer.ts), an unsolicited `101` included: 502 `upstream_error`, the stream
 * closed. After the response head, a failure destroys the client connection so it sees a broken
 * response rather than a silently short one. A client that leaves aborts the stream (RESET), which the
 * supervisor turns into a TCP reset toward the sandbox.
 */
export function exchange(req: ClientRequest, res: ClientResponse, path: string, headers: readonly string[], open: Connect, o: ExchangeOptions, fail: (err: unknown) => void, x?: Exchange): void {
  const ac = new AbortController();
  const guard = o.guard;
  let headTimer: NodeJS.Timeout | undefined;
  let failed = false;
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
        guard.bind(req, res, (pipe: Pipe) => {
          pipe.setTimeout(o.idleTimeoutMs, () => {
            creq.destroy(timeoutError('the relayed connection was idle too long'));
            res.destroy();
          });
          created(null, pipe as unknown as Socket);
        }),
        guard.bind(req, res, (err: Error) => created(err)),
      );
      return undefined;
    }) as never,
  });
  /** The sandbox's answer is refused before any of it reached the client: the stream goes, the client gets the denial. */
  const refuse = (err: Error): void => {
    clearTimeout(headTimer);
    failed = true;
    ac.abort();
    creq.destroy();
    if (!res.destroyed) fail(err);
  };
  if (x !== undefined) res.once('close', () => x.responseClosed(res));
  // The sandbox is waited on once it has the whole request: a long upload is policed by the idle timeout.
  creq.once('finish', () => {
    if (failed || res.headersSent || res.destroyed) return;
    headTimer = setTimeout(() => creq.destroy(timeoutError('the sandbox did not answer in time')), o.headersTimeoutMs);
    headTimer.unref();
  });
  res.once('close', () => {
    if (res.writableFinished) return;
    ac.abort();
    creq.destroy();
  });
  creq.on(
    'error',
    guard.bind(req, res, (err: Error) => {
      clearTimeout(headTimer);
      if (failed) return;
      if (res.headersSent) return void res.destroy();
      if (ac.signal.aborted || res.destroyed) return;
      fail(err);
    }),
  );
  // node:http's client reads any 101 as an upgrade, and without this listener drops the socket and
  // never answers: a plain request asked for no protocol switch.
  creq.on(
    'upgrade',
    guard.bind(req, res, (_ures: IncomingMessage, socket: Duplex) => {
      socket.destroy();
      refuse(new InvalidUpstreamResponse('101 Switching Protocols to a request that asked for no upgrade'));
    }),
  );
  creq.on(
    'response',
    guard.bind(req, res, (ures: IncomingMessage) => {
      clearTimeout(headTimer);
      if (res.destroyed) return void creq.destroy();
      const status = ures.statusCode ?? 0;
      if (!isFinalStatus(status)) return refuse(new InvalidUpstreamResponse(`status ${status}`));
      try {
        res.writeHead(status, forwardResponseHeaders(ures.rawHeaders));
      } catch (err) {
        return refuse(new InvalidUpstreamResponse('a header no response may carry', err));
      }
      // Server-Sent Events: send the head now, do not wait for the first event.
      if (ures.headers['content-type']?.startsWith('text/event-stream') === true) res.flushHeaders();
      if (x !== undefined) {
        x.answered(status);
        ures.on('data', (chunk: Buffer) => (x.bytesOut += chunk.length));
      }
      ures.on(
        'data',
        guard.bind(req, res, (chunk: Buffer) => {
          if (res.write(chunk)) return;
          ures.pause();
          res.once('drain', () => ures.resume());
        }),
      );
      ures.once('end', () => res.end());
      ures.once('close', () => {
        if (!ures.complete) res.destroy();
      });
    }),
  );
  if (req.body === null) creq.end();
  else {
    req.body.pipe(creq);
    // Counted behind pipe(), which already reads the body: a listener added first would start the flow early.
    if (x !== undefined) req.body.on('data', (chunk: Buffer) => (x.bytesIn += chunk.length));
  }
}

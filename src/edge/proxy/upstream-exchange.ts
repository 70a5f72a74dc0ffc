import type { Dispatcher } from 'undici';
import type { Allow } from '../../domain/decide.js';
import type { RouteRequest } from '../../domain/route-key.js';
import type { ClientRequest, ClientResponse } from '../forwarding/client-side.js';
import type { ForwardHop } from '../forwarding/failure-codes.js';
import { forwardResponseHeaders } from '../forwarding/forward-headers.js';
import { H2Response } from '../forwarding/h2-request.js';
import type { Exchange } from '../../observability/exchange.js';
import { InvalidUpstreamResponse, isFinalStatus, isInterimStatus } from '../forwarding/upstream-answer.js';

/**
 * One proxied request carried through undici's dispatcher, its response written into the client's as it
 * arrives. A handler of undici's own (the callbacks its connection calls) rather than `Agent.stream()`:
 * stream() wraps every request in an AsyncResource, hangs `finished()`'s listeners, a drain listener
 * and an abort-signal listener on the response and parses the response head into an object, all of
 * which the proxy's profile showed per request. Here the response head goes from undici's raw list
 * straight to `writeHead`, backpressure listens for 'drain' only when a write is refused, and the one
 * listener per request is the client response's 'close' (abort the upstream request if unfinished,
 * give the connection slot back).
 */

/** The proxy's side of an exchange. */
export interface ExchangeOwner {
  /** The upstream failed before any response byte reached the client: answer the typed denial. */
  upstreamFailed(exchange: UpstreamExchange, err: Error): void;
  /** The client's response closed, however it ended (the connection slot goes back). */
  closed(exchange: UpstreamExchange): void;
  /** A response body chunk after the first passed: the stream is still in use (activity). */
  streamed(exchange: UpstreamExchange): void;
}

export class UpstreamExchange implements Dispatcher.DispatchHandler {
  /** What the proxy dispatched (set by it), so a refused connection can be dispatched again. */
  options: Dispatcher.DispatchOptions | undefined;
  private abort: ((err?: Error) => void) | undefined;
  private resume: (() => void) | undefined;
  /** The first chunk rides on the request's own activity; later ones (a download, an event stream) add theirs. */
  private chunks = 0;

  constructor(
    private readonly owner: ExchangeOwner,
    readonly req: ClientRequest,
    readonly res: ClientResponse,
    readonly decision: Allow,
    readonly route: RouteRequest,
    /** Where a failure happened, for its error code: the sandbox, or a peer gateway's relay listener. */
    readonly hop: ForwardHop,
  ) {
    res.on('close', () => {
      owner.closed(this);
      if (!res.writableFinished) this.abort?.();
    });
  }

  onConnect(abort: (err?: Error) => void): void {
    // The client left while the request waited for a pooled connection.
    if (this.res.destroyed) return abort();
    this.abort = abort;
  }

  /**
   * A throw here is undici's cue to abort the request (core/request.js): it reaches onError, and the
   * client gets 502 upstream_error — how an answer that is no valid HTTP response is refused.
   */
  onHeaders(statusCode: number, raw: Buffer[], resume: () => void): boolean {
    // Interim answers (100 Continue, 103 Early Hints) are not passed on: the final response follows.
    if (isInterimStatus(statusCode)) return true;
    if (!isFinalStatus(statusCode)) throw new InvalidUpstreamResponse(`status ${statusCode}`);
    const res = this.res;
    this.resume = resume;
    // An HTTP/2 client's stream takes the head as one header object, built straight from the raw list; it
    // is sent at once (no flush for Server-Sent Events).
    const h2 = res instanceof H2Response;
    const headers = h2 ? undefined : forwardResponseHeaders(raw);
    try {
      if (h2) res.writeUpstreamHead(statusCode, raw);
      else res.writeHead(statusCode, headers!);
    } catch (err) {
      throw new InvalidUpstreamResponse('a header no response may carry', err);
    }
    // Server-Sent Events: send the head now, do not wait for the first event.
    if (headers !== undefined && isEventStream(headers)) res.flushHeaders();
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (++this.chunks > 1) this.owner.streamed(this);
    if (this.res.write(chunk)) return true;
    // Backpressure: undici stops reading the upstream until the client drains.
    this.res.once('drain', this.resume!);
    return false;
  }

  onComplete(): void {
    this.res.end();
  }

  onError(err: Error): void {
    const res = this.res;
    // A request body still arriving has nowhere to go: its connection is cut.
    const body = this.req.body;
    if (body !== null && !body.complete) body.destroy();
    // Reset mid-response: the client must see a broken response, not a hang or a silent truncation.
    if (res.headersSent) return void res.destroy();
    if (res.destroyed) return;
    this.owner.upstreamFailed(this, err);
  }
}

function isEventStream(headers: readonly string[]): boolean {
  for (let i = 0; i < headers.length; i += 2) {
    if (headers[i]!.length === 12 && headers[i]!.toLowerCase() === 'content-type') return headers[i + 1]!.startsWith('text/event-stream');
  }
  return false;
}

/**
 * An exchange that also fills in its exchange record (observability/exchange.ts): the request body's
 * bytes as undici sends them, the response's status, head time and body bytes, and the end when the
 * client's response closes. Used only when the access log or tracing is on; otherwise the proxy makes
 * the plain exchange above and pays nothing for this.
 */
export class RecordedUpstreamExchange extends UpstreamExchange {
  constructor(owner: ExchangeOwner, req: ClientRequest, res: ClientResponse, decision: Allow, route: RouteRequest, hop: ForwardHop, readonly record: Exchange) {
    super(owner, req, res, decision, route, hop);
    res.on('close', () => record.responseClosed(res));
  }

  onBodySent(chunk: Buffer): void {
    this.record.bytesIn += chunk.length;
  }

  override onHeaders(statusCode: number, raw: Buffer[], resume: () => void): boolean {
    const go = super.onHeaders(statusCode, raw, resume);
    if (statusCode >= 200) this.record.answered(statusCode);
    return go;
  }

  override onData(chunk: Buffer): boolean {
    this.record.bytesOut += chunk.length;
    return super.onData(chunk);
  }
}

import { performance } from 'node:perf_hooks';

/**
 * The exchange record: what one request did at one door — who asked, which sandbox, the answer, its
 * bytes and where its time went. Every door fills one in through the same few calls (the decision, a
 * readiness wait, the upstream exchange, the end), and the two readers of a finished record — the access
 * log and tracing — read only it. A door makes a record only when one of them is configured: with both
 * off, `ExchangeRecorder` is absent and a door's whole cost is one test of an undefined field.
 */

export type ExchangeDoor = 'proxy' | 'http_authz' | 'ext_authz' | 'ext_proc' | 'relay';

/** What a door knows of a request as it arrives. */
export interface ExchangeRequest {
  readonly method: string;
  /** The request target; only its path (up to `?` or `#`) is kept. */
  readonly target: string;
  /** Lower-case names. */
  readonly headers: Readonly<Record<string, string | undefined>>;
  /** The client's address: the connection's, or the one Envoy or nginx reports (ext_authz's `source`, `x-forwarded-for`). */
  readonly client: string;
  /** The address of the connection that brought the request to this gateway: the client, Envoy, nginx or a peer gateway. */
  readonly peer: string;
}

/** `response_code_details` of a request whose client went away before any answer was written. */
export const CLIENT_CLOSED = 'client_closed';
/** `response_code_details` of a response cut after its head (the client or the sandbox went away mid-body). */
const INCOMPLETE = 'incomplete';

/** Longest `x-request-id` kept (a client-chosen value: bounded, never a whole header). */
const MAX_REQUEST_ID = 128;
const TRACEPARENT = /^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}/;

/** The trace tracing hangs on a record (tracing.ts); absent when tracing is off. */
export interface ExchangeTrace {
  readonly traceId: string;
  /** The `traceparent` to send with the request to the sandbox: the upstream span's context. */
  upstreamStarted(x: Exchange): string | undefined;
  /** The record is complete: child spans from its timings, then the spans end. */
  end(x: Exchange): void;
}

/** Where finished records go. */
export interface ExchangeSink {
  write(x: Exchange): void;
}

/** Starts a record's trace (otel-tracer.ts): a child of a trusted `traceparent`, or a new trace. */
export interface ExchangeTracer {
  begin(x: Exchange, req: ExchangeRequest): ExchangeTrace;
}

/** The path of a request target: never its query (it may carry a link token) nor a fragment. */
export function pathOf(target: string): string {
  let end = target.length;
  const q = target.indexOf('?');
  if (q >= 0) end = q;
  const h = target.indexOf('#');
  if (h >= 0 && h < end) end = h;
  return end === target.length ? target : target.slice(0, end);
}

export class Exchange {
  /** Epoch ms. */
  readonly startMs = Date.now();
  /** performance.now() at the start; the other timings are on the same clock. */
  readonly t0 = performance.now();
  readonly method: string;
  readonly path: string;
  readonly requestId: string | undefined;
  readonly client: string;
  /** The principal: a team, `admin`, `anonymous` or `invalid` (undefined where no decision is made). */
  tenant: string | undefined;
  /** The access policy rule that let an allowed request in: `public`, `keys`, `jwt`. */
  policy: string | undefined = undefined;
  namespace: string | undefined;
  name: string | undefined;
  port: number | undefined;
  /** 0 until an answer is written (and when none ever is). */
  status = 0;
  /** The decision's outcome; undefined where the door decides nothing (the relay listener) or before it. */
  allowed: boolean | undefined;
  /** `ok`, a denial's error code (docs/errors.md), `client_closed` or `incomplete`. */
  code = 'ok';
  bytesIn = 0;
  bytesOut = 0;
  decisionStart = 0;
  decisionEnd = 0;
  /** 0 when the request did not wait. */
  waitStart = 0;
  waitEnd = 0;
  waitOutcome: string | undefined;
  upstreamHost: string | undefined;
  /** 0 until the request leaves for the sandbox (or the peer gateway, or over a relay stream). */
  upstreamStart = 0;
  /** When the upstream's response head arrived (0: never). */
  upstreamHead = 0;
  /** The upstream's status (0: none came); differs from `status` where the door translates it (RFC 8441: 101 → 200). */
  upstreamStatus = 0;
  endTime = 0;
  /** Undefined when tracing is off (the id of an incoming `traceparent` is still logged). */
  readonly trace: ExchangeTrace | undefined;
  private readonly incomingTraceId: string | undefined;

  constructor(
    private readonly recorder: ExchangeRecorder,
    readonly door: ExchangeDoor,
    req: ExchangeRequest,
  ) {
    this.method = req.method;
    this.path = pathOf(req.target);
    const id = req.headers['x-request-id'];
    this.requestId = id === undefined ? undefined : id.length > MAX_REQUEST_ID ? id.slice(0, MAX_REQUEST_ID) : id;
    this.client = req.client;
    const tp = req.headers.traceparent;
    this.incomingTraceId = tp === undefined ? undefined : TRACEPARENT.exec(tp)?.[1];
    this.trace = recorder.tracer?.begin(this, req);
  }

  get traceId(): string | undefined {
    return this.trace?.traceId ?? this.incomingTraceId;
  }

  get finished(): boolean {
    return this.endTime !== 0;
  }

  waitStarted(): void {
    this.waitStart = performance.now();
  }

  waitEnded(outcome: string): void {
    this.waitEnd = performance.now();
    this.waitOutcome = outcome;
  }

  /** The request leaves for `host`; returns the `traceparent` to send with it (undefined: send none). */
  upstreamStarted(host: string): string | undefined {
    this.upstreamHost = host;
    this.upstreamStart = performance.now();
    return this.trace?.upstreamStarted(this);
  }

  upstreamResponded(): void {
    this.upstreamHead = performance.now();
  }

  /** A denial was written with `bytes` of body (-1: nothing was written, the client had gone). */
  denied(status: number, code: string, bytes: number): void {
    if (bytes < 0) return;
    this.bytesOut = bytes;
    this.finish(status, code);
  }

  /** A WebSocket tunnel's record ends with its connection: the bytes both ways, handshake included. */
  endsWithTunnel(socket: { readonly bytesRead: number; readonly bytesWritten: number; once(event: 'close', fn: () => void): unknown }): void {
    socket.once('close', () => {
      this.bytesIn = socket.bytesRead;
      this.bytesOut = socket.bytesWritten;
      this.finish(this.status, this.status === 0 ? CLIENT_CLOSED : undefined);
    });
  }

  /**
   * A WebSocket over an HTTP/2 stream (RFC 8441 extended CONNECT): the record ends with the stream. The
   * tunnel counts the stream's DATA bytes into `bytesIn` / `bytesOut` (an HTTP/2 connection carries other
   * streams, so there is no socket count to read).
   */
  endsWithStream(stream: { once(event: 'close', fn: () => void): unknown }): void {
    stream.once('close', () => this.finish(this.status, this.status === 0 ? CLIENT_CLOSED : undefined));
  }

  /**
   * The client's response of a forwarded request closed: the record ends with the upstream's status — unless
   * no upstream response came and the response was finished, by a denial whose writer keeps the record.
   */
  responseClosed(res: { readonly writableFinished: boolean; readonly headersSent: boolean }): void {
    if (this.status === 0 && res.writableFinished) return;
    this.finish(this.status, res.writableFinished ? undefined : res.headersSent ? INCOMPLETE : CLIENT_CLOSED);
  }

  /**
   * The upstream answered with `upstream` (its response head; a WebSocket handshake's answer), and the
   * client is answered `status` — the same, except for a WebSocket over HTTP/2, whose 101 is the stream's 200.
   */
  answered(status: number, upstream = status): void {
    this.status = status;
    this.upstreamStatus = upstream;
    this.upstreamResponded();
  }

  /** The answer was written (or given up): the record is complete and goes to its readers, once. */
  finish(status: number, code?: string): void {
    if (this.endTime !== 0) return;
    this.endTime = performance.now();
    this.status = status;
    if (code !== undefined) this.code = code;
    this.trace?.end(this);
    for (const sink of this.recorder.sinks) sink.write(this);
  }
}

/**
 * Makes records at the doors; absent (undefined) when none of its readers is on: the access log, tracing,
 * per-namespace figures.
 */
export class ExchangeRecorder {
  constructor(
    readonly sinks: readonly ExchangeSink[],
    readonly tracer: ExchangeTracer | undefined,
  ) {}

  begin(door: ExchangeDoor, req: ExchangeRequest): Exchange {
    return new Exchange(this, door, req);
  }
}

import { constants, createSecureServer, createServer, type Http2SecureServer, type Http2Server, type IncomingHttpHeaders, type OutgoingHttpHeaders, type ServerHttp2Session, type ServerHttp2Stream } from 'node:http2';
import type { AddressInfo, Socket } from 'node:net';
import { ConnectionGuard } from './connection-guard.js';
import type { ServerTls } from './http-listen.js';
import { gunzip, inflate as zlibInflate } from 'node:zlib';
import { Connection, GRPC_SERVER_LIMITS, type GrpcServerLimits } from './grpc-h2-connection.js';

/**
 * A small gRPC server on node:http2 (gRPC's PROTOCOL-HTTP2.md): unary, server-streaming and bidi methods,
 * with the message codecs of a @grpc/proto-loader service definition. It answers each case with the status
 * grpc-js's Server gives (server.js, server-interceptors.js) — except a non-POST request (HTTP 405; grpc-js
 * checks no method) and a stream ending mid-message (INTERNAL; grpc-js drops the part and answers
 * UNIMPLEMENTED) — and costs less CPU per call: one listener set per stream with shared functions, one
 * Buffer per outgoing message, a Buffer.concat only when a message spans DATA frames.
 *
 * Not carried over from grpc-js: response compression (grpc-js sends none either), client-streaming
 * methods, custom metadata, keepalive pings from the server (nghttp2 answers the client's pings).
 *
 * Bounded per connection where grpc-js is not (GrpcServerLimits): concurrent streams, request bytes held
 * per stream and per connection (refused with RESOURCE_EXHAUSTED), a handshake and an idle timeout, and a
 * grace after GOAWAY. Compressed messages are inflated on libuv's thread pool, one at a time per stream,
 * and a stream whose answers the peer does not read stops being read (HTTP/2 flow control then stops
 * the peer).
 */

/** gRPC status codes (grpc/doc/statuscodes.md). */
export const GrpcStatus = {
  OK: 0,
  UNKNOWN: 2,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  RESOURCE_EXHAUSTED: 8,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
} as const;

/** grpc-js's default receive limit (DEFAULT_MAX_RECEIVE_MESSAGE_LENGTH), before and after decompression. */
export const MAX_RECEIVE_MESSAGE_BYTES = 4 * 1024 * 1024;

/** The codec half of a grpc-js / proto-loader MethodDefinition that a server needs. */
export interface MethodDefinition<Req, Res> {
  readonly path: string;
  readonly requestStream: boolean;
  readonly responseStream: boolean;
  requestDeserialize(bytes: Buffer): Req;
  responseSerialize(value: Res): Buffer;
}

/** One call, as a handler sees it. Every method is a no-op once the call has ended. */
export interface ServerCall<Req, Res> {
  /** The request message of a unary or server-streaming call (undefined in a bidi call). */
  readonly request: Req;
  /** The address of the connection's peer ('' once it has gone). */
  readonly peer: string;
  /**
   * Aborts when the call ends other than by the handler's `end`/`fail`: the client reset the stream, the
   * connection dropped, the deadline (`grpc-timeout`) passed, an incoming message was refused, or the
   * server was forced down. Made on first read, so calls that never wait pay nothing for it.
   */
  readonly signal: AbortSignal;
  /** Sends one response message (a server-streaming or bidi call). */
  write(message: Res): void;
  /** Ends the call with status OK, after `last` if given (a unary call's answer). */
  end(last?: Res): void;
  /** Ends the call with a non-OK status. */
  fail(code: number, details: string): void;
  /**
   * Counts `bytes` of request data the handler keeps (a queue of messages) against the stream's and the
   * connection's buffer bounds; false, counting nothing, when either would be passed. What is still held
   * when the call ends is returned by itself.
   */
  hold(bytes: number): boolean;
  /** Returns bytes counted by `hold`. */
  release(bytes: number): void;
}

/** What a bidi handler hands back: called per request message, and once when the client half-closes. */
export interface BidiListener<Req> {
  /** `bytes`: the message's size on the wire (uncompressed), for `hold`. */
  message(request: Req, bytes: number): void;
  halfClose(): void;
}

/** A call's abort signal: a function made once, for APIs that take one instead of a closure per call. */
export function callSignal(call: { readonly signal: AbortSignal }): AbortSignal {
  return call.signal;
}

export type UnaryHandler<Req, Res> = (call: ServerCall<Req, Res>) => void;
export type BidiHandler<Req, Res> = (call: ServerCall<undefined, Res>) => BidiListener<Req>;

export interface GrpcServerOptions {
  /** A handler threw (the call ends UNKNOWN, as in grpc-js); the server does not log by itself. */
  onHandlerError(err: unknown, path: string): void;
  /** Per-connection bounds; any left out take GRPC_SERVER_LIMITS's value. */
  readonly limits?: Partial<GrpcServerLimits>;
  /** TLS (ALPN h2) with these server options; `attach` gets the server (a certificate store keeps it current). */
  readonly tls?: ServerTls;
  /** Connection cap and first-request timeouts (connection-guard.ts); default: the default limits. */
  readonly guard?: ConnectionGuard;
}

export { GRPC_SERVER_LIMITS, type GrpcServerLimits };

const enum Kind {
  Unary,
  ServerStreaming,
  Bidi,
}

interface Method {
  readonly kind: Kind;
  readonly path: string;
  readonly deserialize: (bytes: Buffer) => unknown;
  readonly serialize: (value: unknown) => Buffer;
  readonly handler: (call: Call) => unknown;
  readonly onHandlerError: (err: unknown, path: string) => void;
}

const ACCEPT_ENCODING = 'identity,deflate,gzip';
const RESPONSE_HEADERS: OutgoingHttpHeaders = Object.freeze({
  ':status': 200,
  'content-type': 'application/grpc+proto',
  'grpc-accept-encoding': ACCEPT_ENCODING,
  'grpc-encoding': 'identity',
});
const OK_TRAILERS: OutgoingHttpHeaders = Object.freeze({ 'grpc-status': '0', 'grpc-message': 'OK' });
const STREAM_OPTIONS = Object.freeze({ waitForTrailers: true });
const END_STREAM = Object.freeze({ endStream: true });

/** grpc-timeout (PROTOCOL-HTTP2.md): at most 8 digits and a unit. */
const TIMEOUT = /^(\d{1,8})([HMSmun])$/;
const UNIT_MS: Readonly<Record<string, number>> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: 0.001, n: 0.000_001 };
/** setTimeout's ceiling; a longer deadline is as good as none. */
const MAX_TIMER_MS = 2 ** 31 - 1;

const kCall = Symbol('grpcCall');
const kConnection = Symbol('grpcConnection');
type GrpcStream = ServerHttp2Stream & { [kCall]?: Call; [kConnection]?: Connection };

const enum State {
  Open,
  /** Status sent (or being sent): incoming data is ignored. */
  Ended,
}

/** Why a stream is not being read (bits): its answers wait for the peer's window, or a message is inflating. */
const enum Paused {
  Write = 1,
  Inflate = 2,
}

class Call implements ServerCall<unknown, unknown> {
  request: unknown = undefined;
  listener: BidiListener<unknown> | undefined = undefined;
  state = State.Open;
  timer: NodeJS.Timeout | undefined = undefined;
  /** A message that spans DATA frames: its chunks so far, their length, and the length it needs (held). */
  chunks: Buffer[] | undefined = undefined;
  have = 0;
  need = 0;
  /** Paused bits; while a message inflates, data that still arrives waits in `rest`, and 'end' in `endPending`. */
  paused = 0;
  rest: Buffer | undefined = undefined;
  endPending = false;
  /** Request bytes counted against the stream's and the connection's bounds. */
  private held = 0;
  private headersSent = false;
  private ac: AbortController | undefined = undefined;
  private trailers: OutgoingHttpHeaders = OK_TRAILERS;

  constructor(
    readonly stream: GrpcStream,
    readonly method: Method,
    readonly encoding: string | undefined,
    readonly conn: Connection,
  ) {}

  get peer(): string {
    return this.stream.session?.socket?.remoteAddress ?? '';
  }

  get signal(): AbortSignal {
    if (this.ac === undefined) {
      this.ac = new AbortController();
      if (this.state === State.Ended) this.ac.abort();
    }
    return this.ac.signal;
  }

  write(message: unknown): void {
    if (!this.writable()) return;
    const frame = this.frame(message);
    if (frame === undefined) return;
    this.sendHeaders();
    // The peer's window is shut (or it reads slower than we answer): stop reading its requests until the
    // answers drain, so what it sends waits in its own flow-control window instead of our memory.
    if (!this.stream.write(frame)) this.pause(Paused.Write);
  }

  end(last?: unknown): void {
    if (!this.writable()) return;
    let frame: Buffer | undefined;
    if (last !== undefined) {
      frame = this.frame(last);
      if (frame === undefined) return;
    }
    this.sendHeaders();
    this.close();
    if (frame === undefined) this.stream.end();
    else this.stream.end(frame);
  }

  fail(code: number, details: string): void {
    this.finish(code, details, undefined, false);
  }

  hold(bytes: number): boolean {
    if (this.state !== State.Open) return false;
    const { maxStreamBufferBytes, maxConnectionBufferBytes } = this.conn.limits;
    if (this.held + bytes > maxStreamBufferBytes || this.conn.buffered + bytes > maxConnectionBufferBytes) return false;
    this.held += bytes;
    this.conn.buffered += bytes;
    return true;
  }

  release(bytes: number): void {
    const n = Math.min(bytes, this.held);
    this.held -= n;
    this.conn.buffered -= n;
  }

  pause(reason: Paused): void {
    if (this.paused === 0) this.stream.pause();
    if (reason === Paused.Write && (this.paused & Paused.Write) === 0) this.stream.once('drain', onDrain);
    this.paused |= reason;
  }

  unpause(reason: Paused): void {
    this.paused &= ~reason;
    if (this.paused === 0 && this.state === State.Open) this.stream.resume();
  }

  /** Ends the call with a status: trailers-only before any message, else trailers after the messages. */
  finish(code: number, details: string, extra: OutgoingHttpHeaders | undefined, abort: boolean): void {
    if (this.state !== State.Open) return;
    this.close();
    const trailers: OutgoingHttpHeaders = { 'grpc-status': String(code), 'grpc-message': percentEncode(details), ...extra };
    const stream = this.stream;
    if (!stream.destroyed && !stream.closed) {
      if (this.headersSent) {
        this.trailers = trailers;
        stream.end();
      } else {
        this.headersSent = true;
        refuse(stream, { ...RESPONSE_HEADERS, ...trailers });
      }
    }
    if (abort) this.ac?.abort();
  }

  /** The stream closed (RST_STREAM, connection loss, forced shutdown) or the call ended. */
  closed(): void {
    if (this.state === State.Open) {
      this.close();
      this.ac?.abort();
    } else if (this.timer !== undefined) clearTimeout(this.timer);
  }

  sendTrailers(): void {
    this.stream.sendTrailers(this.trailers);
  }

  /** Open, and the stream not destroyed underneath ('close' comes a tick after a reset). */
  private writable(): boolean {
    return this.state === State.Open && !this.stream.destroyed && !this.stream.closed;
  }

  private close(): void {
    this.state = State.Ended;
    this.chunks = undefined;
    this.rest = undefined;
    this.release(this.held);
    if (this.timer !== undefined) clearTimeout(this.timer);
    // Whatever the client still sends is read and dropped (onData ignores it), not left in its window.
    if (this.paused !== 0) {
      this.paused = 0;
      this.stream.resume();
    }
  }

  private sendHeaders(): void {
    if (this.headersSent) return;
    this.headersSent = true;
    this.stream.respond(RESPONSE_HEADERS, STREAM_OPTIONS);
  }

  /** The 5-byte prefix and the message in one Buffer (uncompressed: flag 0). */
  private frame(message: unknown): Buffer | undefined {
    let body: Buffer;
    try {
      body = this.method.serialize(message);
    } catch {
      this.finish(GrpcStatus.INTERNAL, 'Error serializing response', undefined, true);
      return undefined;
    }
    const out = Buffer.allocUnsafe(5 + body.length);
    out[0] = 0;
    out.writeUInt32BE(body.length, 1);
    out.set(body, 5);
    return out;
  }
}

/** grpc-message (PROTOCOL-HTTP2.md): UTF-8, percent-encoding every byte outside 0x20–0x7E and '%'. */
export function percentEncode(s: string): string {
  if (/^[\x20-\x24\x26-\x7e]*$/.test(s)) return s;
  let out = '';
  for (const b of Buffer.from(s, 'utf8')) {
    out += b >= 0x20 && b <= 0x7e && b !== 0x25 ? String.fromCharCode(b) : '%' + b.toString(16).toUpperCase().padStart(2, '0');
  }
  return out;
}

/**
 * A complete response before the request is complete: then RST_STREAM NO_ERROR, so the client stops
 * sending (RFC 9113 §8.1) — a client announcing a 4 GiB message need not be read to its end.
 */
function refuse(stream: ServerHttp2Stream, headers: OutgoingHttpHeaders): void {
  stream.respond(headers, END_STREAM);
  if (!stream.readableEnded) stream.close(constants.NGHTTP2_NO_ERROR);
}

function onDeadline(call: Call): void {
  call.timer = undefined;
  call.finish(GrpcStatus.DEADLINE_EXCEEDED, 'Deadline exceeded', undefined, true);
}

// Stream listeners are shared functions (`this` is the stream), so a call allocates no closures.

function onData(this: GrpcStream, chunk: Buffer): void {
  const call = this[kCall]!;
  if (call.state !== State.Open) return;
  if ((call.paused & Paused.Inflate) !== 0) {
    call.rest = call.rest === undefined ? chunk : Buffer.concat([call.rest, chunk]);
    return;
  }
  consume(call, chunk);
}

/** Splits arriving bytes into messages: each complete one is delivered, a partial one is kept (held). */
function consume(call: Call, chunk: Buffer): void {
  let buf = chunk;
  if (call.chunks !== undefined) {
    call.chunks.push(chunk);
    call.have += chunk.length;
    if (call.have < call.need) return;
    buf = Buffer.concat(call.chunks, call.have);
    call.chunks = undefined;
    call.release(call.need);
  }
  let at = 0;
  for (;;) {
    const left = buf.length - at;
    if (left === 0) return;
    if (left < 5) return keep(call, buf, at, 5);
    const length = buf.readUInt32BE(at + 1);
    // Refused on the prefix, before any of the message is buffered.
    if (length > MAX_RECEIVE_MESSAGE_BYTES) {
      return call.finish(GrpcStatus.RESOURCE_EXHAUSTED, `Received message larger than max (${length} vs ${MAX_RECEIVE_MESSAGE_BYTES})`, undefined, true);
    }
    if (left < 5 + length) return keep(call, buf, at, 5 + length);
    const flag = buf[at]!;
    const bytes = buf.subarray(at + 5, at + 5 + length);
    at += 5 + length;
    if (flag !== 0) return inflate(call, flag, bytes, buf.subarray(at));
    deliver(call, bytes, length);
    if (call.state !== State.Open) return;
  }
}

/** Keeps a partial message, holding the whole length its prefix announces: refused before it is buffered. */
function keep(call: Call, buf: Buffer, at: number, need: number): void {
  if (!call.hold(need)) return overBuffer(call, need);
  const rest = buf.subarray(at);
  call.chunks = [rest];
  call.have = rest.length;
  call.need = need;
}

function overBuffer(call: Call, bytes: number): void {
  const { maxStreamBufferBytes, maxConnectionBufferBytes } = call.conn.limits;
  call.finish(
    GrpcStatus.RESOURCE_EXHAUSTED,
    `Request buffer limit: ${bytes} more bytes would pass the stream's ${maxStreamBufferBytes} or the connection's ${maxConnectionBufferBytes}`,
    undefined,
    true,
  );
}

function deliver(call: Call, body: Buffer, bytes: number): void {
  let message: unknown;
  try {
    message = call.method.deserialize(body);
  } catch {
    return call.finish(GrpcStatus.INTERNAL, 'Error deserializing request', undefined, true);
  }
  const method = call.method;
  if (method.kind === Kind.Bidi) {
    try {
      call.listener!.message(message, bytes);
    } catch (err) {
      handlerFailed(call, err);
    }
    return;
  }
  if (call.request !== undefined) {
    return call.finish(GrpcStatus.UNIMPLEMENTED, `Received a second request message for server streaming method ${method.path}`, undefined, true);
  }
  call.request = message;
}

/** Deflate expands at most about 1032:1 (zlib's technical notes): what a compressed message can grow to. */
const MAX_DEFLATE_RATIO = 1032;

/**
 * The Compressed-Flag: set means "compressed with grpc-encoding". Inflated on libuv's thread pool, bounded
 * by maxOutputLength (a deflate bomb stops at the receive limit); the stream is not read meanwhile, so
 * messages stay in order, and what the output may grow to is held against the buffer bounds.
 */
function inflate(call: Call, flag: number, bytes: Buffer, rest: Buffer): void {
  const encoding = call.encoding;
  if (flag !== 1 || encoding === undefined || encoding === 'identity') {
    return call.finish(GrpcStatus.INTERNAL, flag !== 1 ? `Invalid compressed flag ${flag}` : 'Compressed flag set without a grpc-encoding', undefined, true);
  }
  if (encoding !== 'gzip' && encoding !== 'deflate') {
    return call.finish(
      GrpcStatus.UNIMPLEMENTED,
      `Received message compressed with unsupported encoding "${encoding}"`,
      { 'grpc-accept-encoding': ACCEPT_ENCODING },
      true,
    );
  }
  const reserve = Math.min(MAX_RECEIVE_MESSAGE_BYTES, bytes.length * MAX_DEFLATE_RATIO);
  if (!call.hold(reserve)) return overBuffer(call, reserve);
  call.pause(Paused.Inflate);
  if (rest.length > 0) call.rest = rest;
  const done = (err: Error | null, out: Buffer): void => inflated(call, reserve, err, out);
  const options = { maxOutputLength: MAX_RECEIVE_MESSAGE_BYTES };
  if (encoding === 'gzip') gunzip(bytes, options, done);
  else zlibInflate(bytes, options, done);
}

function inflated(call: Call, reserve: number, err: Error | null, out: Buffer): void {
  call.release(reserve);
  if (call.state !== State.Open) return;
  if (err !== null) {
    if ((err as { code?: unknown }).code === 'ERR_BUFFER_TOO_LARGE') {
      call.finish(GrpcStatus.RESOURCE_EXHAUSTED, `Received message that decompresses to a size larger than ${MAX_RECEIVE_MESSAGE_BYTES}`, undefined, true);
    } else call.finish(GrpcStatus.INTERNAL, 'Failed to decompress message', undefined, true);
    return;
  }
  deliver(call, out, out.length);
  // Then what arrived behind the message, which may hold another compressed one.
  call.paused &= ~Paused.Inflate;
  const rest = call.rest;
  call.rest = undefined;
  if (rest !== undefined && call.state === State.Open) consume(call, rest);
  if ((call.paused & Paused.Inflate) !== 0) return;
  if (call.endPending && call.state === State.Open) halfClosed(call);
  if (call.paused === 0) call.stream.resume();
}

function handlerFailed(call: Call, err: unknown): void {
  call.method.onHandlerError(err, call.method.path);
  call.finish(GrpcStatus.UNKNOWN, 'Unknown error', undefined, true);
}

function onEnd(this: GrpcStream): void {
  const call = this[kCall]!;
  if (call.state !== State.Open) return;
  if ((call.paused & Paused.Inflate) !== 0) call.endPending = true;
  else halfClosed(call);
}

function halfClosed(call: Call): void {
  call.endPending = false;
  if (call.chunks !== undefined) {
    return call.finish(GrpcStatus.INTERNAL, 'Received a truncated message', undefined, true);
  }
  const method = call.method;
  try {
    if (method.kind === Kind.Bidi) call.listener!.halfClose();
    else if (call.request === undefined) {
      call.finish(GrpcStatus.UNIMPLEMENTED, `Received no request message for server streaming method ${method.path}`, undefined, true);
    } else method.handler(call);
  } catch (err) {
    handlerFailed(call, err);
  }
}

function onClose(this: GrpcStream): void {
  this[kCall]!.closed();
}

function onStreamClosed(this: GrpcStream): void {
  this[kConnection]!.closed();
}

function onWantTrailers(this: GrpcStream): void {
  this[kCall]!.sendTrailers();
}

function onDrain(this: GrpcStream): void {
  this[kCall]!.unpause(Paused.Write);
}

function ignore(): void {}

export class GrpcH2Server {
  private readonly methods = new Map<string, Method>();
  private readonly sessions = new Set<ServerHttp2Session>();
  private readonly server: Http2Server | Http2SecureServer;
  private readonly limits: GrpcServerLimits;
  /** The connection node:http2 is making a session of (it does so synchronously, in its connection listener). */
  private accepting: Socket | undefined;

  constructor(private readonly options: GrpcServerOptions) {
    this.limits = { ...GRPC_SERVER_LIMITS, ...options.limits };
    // grpc-js lifts node's session memory cap the same way: past it, node refuses new streams. Memory is
    // bounded instead by the streams a connection may open and the bytes its calls may hold.
    const http2Options = {
      maxSessionMemory: Number.MAX_SAFE_INTEGER,
      maxSendHeaderBlockLength: Number.MAX_SAFE_INTEGER,
      settings: { maxConcurrentStreams: this.limits.maxConcurrentStreams },
    };
    if (options.tls === undefined) this.server = createServer(http2Options);
    else {
      const secure = createSecureServer({ ...options.tls.options, ...http2Options, ALPNProtocols: ['h2'] });
      options.tls.attach(secure);
      this.server = secure;
    }
    // Ahead of node:http2's own listener, which makes the session: a session's `socket` is a proxy of the connection.
    this.server.prependListener(options.tls === undefined ? 'connection' : 'secureConnection', (socket: Socket) => (this.accepting = socket));
    this.server.on('stream', (stream: GrpcStream, headers: IncomingHttpHeaders) => this.onStream(stream, headers));
    this.server.on('session', (session: ServerHttp2Session) => this.onSession(session));
  }

  addUnary<Req, Res>(def: MethodDefinition<Req, Res>, handler: UnaryHandler<Req, Res>): void {
    this.add(def, false, false, Kind.Unary, handler);
  }

  addServerStreaming<Req, Res>(def: MethodDefinition<Req, Res>, handler: UnaryHandler<Req, Res>): void {
    this.add(def, false, true, Kind.ServerStreaming, handler);
  }

  addBidi<Req, Res>(def: MethodDefinition<Req, Res>, handler: BidiHandler<Req, Res>): void {
    this.add(def, true, true, Kind.Bidi, handler);
  }

  /** Listens on host:port (0 picks a free port) and resolves to the bound port. */
  listen(host: string, port: number): Promise<number> {
    (this.options.guard ?? new ConnectionGuard('grpc')).install(this.server, { tls: this.options.tls !== undefined, http1: false });
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen(port, host, () => {
        this.server.off('error', reject);
        resolve((this.server.address() as AddressInfo).port);
      });
    });
  }

  /**
   * Stops accepting connections, sends GOAWAY on every connection (new streams are refused, calls in
   * flight go on), and resolves once every connection has closed or, after `graceMs`, destroys what is
   * left (its calls' signals abort).
   */
  close(graceMs: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        for (const s of this.sessions) s.destroy();
        resolve();
      }, graceMs);
      timer.unref();
      this.server.close(() => {
        clearTimeout(timer);
        resolve();
      });
      for (const s of this.sessions) s.close();
    });
  }

  private onSession(session: ServerHttp2Session): void {
    this.sessions.add(session);
    const conn = new Connection(session, this.limits, this.accepting);
    this.accepting = undefined;
    (session as ServerHttp2Session & { [kConnection]?: Connection })[kConnection] = conn;
    session.on('error', ignore);
    session.once('remoteSettings', () => conn.settled());
    session.once('goaway', () => conn.goingAway());
    session.once('close', () => {
      conn.ended();
      this.sessions.delete(session);
    });
  }

  private add<Req, Res>(def: MethodDefinition<Req, Res>, requestStream: boolean, responseStream: boolean, kind: Kind, handler: unknown): void {
    if (def.requestStream !== requestStream || def.responseStream !== responseStream) {
      throw new Error(`${def.path}: requestStream=${def.requestStream} responseStream=${def.responseStream} does not fit this kind of handler`);
    }
    this.methods.set(def.path, {
      kind,
      path: def.path,
      deserialize: (b) => def.requestDeserialize(b),
      serialize: (v) => def.responseSerialize(v as Res),
      handler: handler as (call: Call) => unknown,
      onHandlerError: this.options.onHandlerError,
    });
  }

  private onStream(stream: GrpcStream, headers: IncomingHttpHeaders): void {
    stream.on('error', ignore);
    const conn = (stream.session as ServerHttp2Session & { [kConnection]?: Connection })[kConnection]!;
    stream[kConnection] = conn;
    conn.opened();
    stream.once('close', onStreamClosed);
    // PROTOCOL-HTTP2.md: gRPC is POST with content-type application/grpc[+format][;params].
    if (headers[':method'] !== 'POST') {
      refuse(stream, { ':status': 405, allow: 'POST' });
      return;
    }
    const type = headers['content-type'];
    if (type === undefined || !(type === 'application/grpc' || type.startsWith('application/grpc+') || type.startsWith('application/grpc;'))) {
      refuse(stream, { ':status': 415 });
      return;
    }
    const path = headers[':path'] ?? '';
    const method = this.methods.get(path);
    if (method === undefined) {
      refuse(stream, { ...RESPONSE_HEADERS, 'grpc-status': String(GrpcStatus.UNIMPLEMENTED), 'grpc-message': percentEncode(`The server does not implement the method ${path}`) });
      return;
    }
    const encoding = headers['grpc-encoding'];
    const call = new Call(stream, method, typeof encoding === 'string' ? encoding : undefined, conn);
    stream[kCall] = call;
    stream.on('data', onData);
    stream.on('end', onEnd);
    stream.on('close', onClose);
    stream.on('wantTrailers', onWantTrailers);
    const timeout = headers['grpc-timeout'];
    if (typeof timeout === 'string') {
      const m = TIMEOUT.exec(timeout);
      if (m === null) return call.finish(GrpcStatus.INTERNAL, `Invalid grpc-timeout value "${timeout}"`, undefined, true);
      const ms = Number(m[1]) * UNIT_MS[m[2]!]!;
      if (ms <= MAX_TIMER_MS) call.timer = setTimeout(onDeadline, ms, call);
    }
    if (method.kind === Kind.Bidi) {
      try {
        call.listener = method.handler(call) as BidiListener<unknown>;
      } catch (err) {
        handlerFailed(call, err);
      }
    }
  }
}

import type { Server } from 'node:http';
import type { Socket } from 'node:net';
import type { HeaderMap } from '../domain/route-key.js';
import { firstRequest } from '../lib/connection-guard.js';
import type { Logger } from '../observability/logger.js';

/**
 * A server's own reader of the requests it can answer without node:http's request and response objects,
 * which cost more per request than a whole decision. Two servers install one: the
 * admin port for HTTP authz (authz-front.ts), the embedded proxy for bodyless GET and HEAD
 * (proxy/proxy-front.ts). Each says which request lines it takes (`FrontHandler.accepts`); beyond that the
 * front reads only one shape: HTTP/1.1, no body, no `Transfer-Encoding`, `Expect` or `Upgrade`, a Host,
 * each header once, visible ASCII only, a head of at most 16 KiB.
 *
 * At the first request of any other shape it hands the connection — that request and everything after
 * it — to node:http for good, which answers or refuses it as it always has. So every malformed input
 * still meets node:http's parser; a front only ever answers requests it has fully read and found
 * well-formed. Requests on one connection are answered in order, one at a time (a readiness wait or a
 * proxied exchange holds the next).
 */

/** Bytes no response header value may hold (node:http's writeHead refuses the same): a CR or LF would break the head. */
export const BAD_HEADER_VALUE = /[^\t\x20-\x7e\x80-\xff]/;

/** Node's default limit on a request head (`--max-http-header-size`); a longer one goes to node:http, which answers 431. */
export const MAX_HEAD_BYTES = 16 * 1024;
/** More header lines than these requests carry: past it, node:http reads the request. */
export const MAX_HEADERS = 100;

export interface FrontRequest {
  readonly method: string;
  readonly url: string;
  /** Lower-case names, each present once. */
  readonly headers: HeaderMap;
  /** The header lines as sent (name case kept, values without surrounding blanks), as node:http's rawHeaders. */
  readonly rawHeaders: string[];
  /** `Connection: close`: answer, then close. */
  readonly close: boolean;
}

/** What a server's front answers itself; `C` is what it keeps per connection. */
export interface FrontHandler<C> {
  /** True when the front answers a request with this request line itself (node:http reads the connection otherwise). */
  accepts(method: string, url: string): boolean;
  /** Made once per connection the front reads. */
  connect(conn: FrontConnection<C>): C;
  /** Answers `req`, and calls the connection's `done()` once the whole answer is written (or cuts it). */
  handle(req: FrontRequest, on: C): void;
}

/**
 * The request line a front reads: a method of capitals, a target of visible ASCII, HTTP/1.1. The target
 * is one node:http's parser takes: it starts with `/` or `*`, or is absolute-form — a scheme of letters,
 * `://`, an authority without `"#<>\\^\`{|}`, then a path or query.
 */
const REQUEST_LINE = /^[A-Z]{1,16} (?:[/*][\x21-\x7e]*|[A-Za-z]+:\/\/[\x21\x24-\x2e\x30-\x3b\x3d\x40-\x5b\x5d\x5f\x61-\x7a\x7e]*(?:[/?][\x21-\x7e]*)?) HTTP\/1\.1\r\n/;
/**
 * The field lines, each with its CRLF: a tchar name, a colon, a value of visible ASCII, space and tab.
 * Control bytes, obs-text, obs-fold and a bare CR or LF all fail it. (Native regex code reads a head
 * several times faster than a character loop in JavaScript.)
 */
const FIELD_LINES = /^(?:[!#$%&'*+.^_`|~0-9A-Za-z-]+:[\t\x20-\x7e]*\r\n)*$/;

function isOws(c: number): boolean {
  return c === 0x20 || c === 0x09;
}

/**
 * Reads the request head `text[0, end)` (`end`: where its blank line starts; latin1 text, one character per
 * byte) when it has the one shape a front reads and `accepts` takes its request line; undefined when
 * node:http must read it.
 */
export function parseFrontHead(text: string, end: number, accepts: (method: string, url: string) => boolean): FrontRequest | undefined {
  if (!REQUEST_LINE.test(text)) return undefined;
  const sp1 = text.indexOf(' ');
  const sp2 = text.indexOf(' ', sp1 + 1);
  const method = text.slice(0, sp1);
  const url = text.slice(sp1 + 1, sp2);
  if (!accepts(method, url)) return undefined;
  const first = sp2 + 11;
  if (first < end + 2 && !FIELD_LINES.test(text.slice(first, end + 2))) return undefined;
  // A plain object, as node:http's req.headers is: a name the prototype has (`constructor`) reads as
  // already present, so such a request goes to node:http.
  const headers: Record<string, string> = {};
  const rawHeaders: string[] = [];
  for (let pos = first; pos < end; ) {
    const colon = text.indexOf(':', pos);
    const eol = text.indexOf('\r\n', colon);
    const name = text.slice(pos, colon);
    const lower = name.toLowerCase();
    let from = colon + 1;
    let to = eol;
    while (from < to && isOws(text.charCodeAt(from))) from++;
    while (to > from && isOws(text.charCodeAt(to - 1))) to--;
    if (headers[lower] !== undefined || rawHeaders.length >= 2 * MAX_HEADERS) return undefined;
    const value = text.slice(from, to);
    headers[lower] = value;
    rawHeaders.push(name, value);
    pos = eol + 2;
  }
  if (headers.host === undefined || headers['transfer-encoding'] !== undefined || headers.expect !== undefined || headers.upgrade !== undefined) return undefined;
  const length = headers['content-length'];
  if (length !== undefined && length !== '0') return undefined;
  const connection = headers.connection?.toLowerCase();
  if (connection !== undefined && connection !== 'keep-alive' && connection !== 'close') return undefined;
  return { method, url, headers, rawHeaders, close: connection === 'close' };
}

function hasBareLf(text: string): boolean {
  for (let i = text.indexOf('\n'); i >= 0; i = text.indexOf('\n', i + 1)) if (i === 0 || text.charCodeAt(i - 1) !== 0x0d) return true;
  return false;
}

/** `Date` as node:http writes it, formatted at most once a second. */
let dateSecond = -1;
let dateText = '';
export function httpDate(): string {
  const now = Date.now();
  const second = Math.floor(now / 1000);
  if (second !== dateSecond) {
    dateSecond = second;
    dateText = new Date(now).toUTCString();
  }
  return dateText;
}

/** node:http's answer to a head not complete within the server's `headersTimeout`. */
/** The start of HTTP/2's client connection preface (RFC 9113 §3.4), which reads like a request head. */
const H2_PREFACE_HEAD = 'PRI * HTTP/2.0\r\n\r\n';
const HEAD_TIMEOUT = 'HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n';

/** One connection a front reads. Requests are answered one at a time, in order. */
export class FrontConnection<C> {
  /** Unread bytes, as latin1 text (one character per byte: what is handed back to node:http is the same bytes). */
  private pending = '';
  /** A request is being answered (a readiness wait may hold it); what arrives meanwhile waits in `pending`. */
  private busy = false;
  /** Inside drain()'s loop: an answer sent synchronously lets the loop go on rather than recursing. */
  private draining = false;
  private closeAfter = false;
  /** A request head was read whole: the listener's request-header timeout no longer applies (connection-guard.ts). */
  private asked = false;
  /** The client finished sending (half-close). */
  private ended = false;
  /** When the first bytes of a head still incomplete arrived (0: none waiting). */
  private headSince = 0;
  private aborts: AbortController | undefined;
  /** Called once if the connection closes while a request is answered (the proxy's response then closes). */
  gone: (() => void) | undefined;
  private readonly onData = (chunk: Buffer): void => {
    const text = chunk.toString('latin1');
    this.pending = this.pending.length === 0 ? text : this.pending + text;
    if (!this.busy) this.drain();
    // A client that keeps sending while its request is answered is read no further than one more head.
    else if (this.pending.length > MAX_HEAD_BYTES) this.socket.pause();
  };
  // As node:http does (no half-open connections): a request still waiting when the client stops sending
  // is abandoned, and the connection closed. What arrived before the end was answered as it was read.
  private readonly onEnd = (): void => {
    this.ended = true;
    this.aborts?.abort();
    this.socket.end();
  };
  // Idle past the keep-alive timeout: closed. A request being answered is not idle (a wait and a proxied
  // exchange have bounds of their own).
  private readonly onTimeout = (): void => {
    if (!this.busy) this.socket.destroy();
  };
  private readonly onError = (): void => {
    this.socket.destroy();
  };

  private readonly context: C;

  constructor(
    readonly socket: Socket,
    private readonly front: HttpFront<C>,
  ) {
    this.context = front.handler.connect(this);
    socket.on('data', this.onData);
    socket.on('end', this.onEnd);
    socket.on('error', this.onError);
    // A listener of its own, not setTimeout()'s callback (that one is called once: an idle period after a
    // long wait would then go unnoticed).
    socket.on('timeout', this.onTimeout);
    socket.setTimeout(front.keepAliveTimeoutMs);
    socket.once('close', () => {
      front.forget(this);
      this.aborts?.abort();
      const gone = this.gone;
      this.gone = undefined;
      gone?.();
    });
  }

  get idle(): boolean {
    return !this.busy;
  }

  /** The answer must say `Connection: close` and end the connection. */
  get closing(): boolean {
    return this.closeAfter || this.ended || this.front.closing;
  }

  /** A response head's `Connection` line (and `Keep-Alive`, with the server's timeout), each with its CRLF. */
  connectionLines(close: boolean): string {
    return close ? 'Connection: close\r\n' : this.front.keepAliveLines;
  }

  /** Fires when the client goes away (a readiness wait then answers nothing). */
  signal(): AbortSignal {
    this.aborts ??= new AbortController();
    if (this.socket.destroyed) this.aborts.abort();
    return this.aborts.signal;
  }

  /**
   * The answer to the current request is written: close if it said so (or the server began closing while
   * it streamed), else read the next request.
   */
  done(close: boolean): void {
    if ((close || this.front.closing) && !this.socket.destroyed) this.socket.end();
    this.busy = false;
    this.aborts = undefined;
    this.gone = undefined;
    if (!this.draining && !this.socket.destroyed) {
      this.drain();
      if (!this.busy && this.socket.isPaused()) this.socket.resume();
    }
  }

  /** Answers what `pending` holds, one request at a time, until it needs more bytes or node:http takes over. */
  private drain(): void {
    this.draining = true;
    while (!this.busy && this.pending.length > 0 && !this.socket.destroyed && !this.socket.writableEnded) {
      const end = this.pending.indexOf('\r\n\r\n');
      if (end < 0) {
        // Past the limit, or a line ended by a bare LF (which no head this front reads has, and which
        // node:http refuses at once): node:http's to answer.
        if (this.pending.length > MAX_HEAD_BYTES || hasBareLf(this.pending)) this.handOff();
        else this.incompleteHead();
        break;
      }
      this.headSince = 0;
      const req = end <= MAX_HEAD_BYTES ? parseFrontHead(this.pending, end, this.front.handler.accepts) : undefined;
      if (req === undefined) {
        this.handOff();
        break;
      }
      this.pending = this.pending.slice(end + 4);
      if (!this.asked) {
        this.asked = true;
        firstRequest(this.socket);
      }
      this.busy = true;
      this.closeAfter = req.close;
      try {
        this.front.handler.handle(req, this.context);
      } catch (err) {
        // A bug while answering: this request gets no answer, so the connection cannot go on.
        this.front.log.error({ err }, 'answering a request read by the front failed');
        this.socket.destroy();
      }
    }
    this.draining = false;
  }

  /**
   * A head still incomplete: as node:http's `headersTimeout`, one that has taken longer than that since its
   * first bytes is answered 408 (checked as bytes arrive; a client that sends nothing meets the idle timeout).
   */
  private incompleteHead(): void {
    const now = Date.now();
    if (this.headSince === 0) this.headSince = now;
    else if (now - this.headSince > this.front.headersTimeoutMs) this.socket.end(HEAD_TIMEOUT);
  }

  /** node:http reads this connection from here on: the unread bytes first, then whatever comes next. */
  private handOff(): void {
    const s = this.socket;
    s.removeListener('data', this.onData);
    s.removeListener('end', this.onEnd);
    s.removeListener('error', this.onError);
    s.setTimeout(0);
    s.removeListener('timeout', this.onTimeout);
    this.front.forget(this);
    const pending = this.pending;
    if (pending.length > 0) s.unshift(Buffer.from(pending, 'latin1'));
    this.pending = '';
    this.front.handOff(s, pending);
  }
}

/**
 * Installs a front on `server` (an http.Server, before it listens): the server's own connection handling
 * becomes the hand-off target, and every new connection starts with the front.
 */
export class HttpFront<C> {
  readonly keepAliveLines: string;
  readonly keepAliveTimeoutMs: number;
  readonly headersTimeoutMs: number;
  /** Set by closeIdle(): answers in flight then say `Connection: close`. */
  closing = false;
  /**
   * Takes a connection that opens with HTTP/2's connection preface (h2c with prior knowledge, RFC 9113
   * §3.3); undefined: node:http answers it (400), as any request the front does not read.
   */
  h2c: ((socket: Socket) => void) | undefined;
  private readonly connections = new Set<FrontConnection<C>>();
  private readonly nodeHttp: (socket: Socket) => void;

  /** `event`: where the server's connections start — 'connection', or 'secureConnection' on an https.Server. */
  constructor(
    server: Server,
    readonly handler: FrontHandler<C>,
    readonly log: Logger,
    event: 'connection' | 'secureConnection' = 'connection',
  ) {
    const own = server.listeners(event);
    if (own.length !== 1) throw new Error(`the server has ${own.length} ${event} listeners; a front expects node:http's one`);
    const nodeHttp = own[0] as (socket: Socket) => void;
    this.nodeHttp = (socket) => nodeHttp.call(server, socket);
    this.keepAliveTimeoutMs = server.keepAliveTimeout;
    this.headersTimeoutMs = server.headersTimeout;
    this.keepAliveLines = `Connection: keep-alive\r\nKeep-Alive: timeout=${Math.floor(server.keepAliveTimeout / 1000)}\r\n`;
    server.removeListener(event, nodeHttp);
    server.on(event, (socket: Socket) => this.connections.add(new FrontConnection(socket, this)));
  }

  /** Connections the front reads now (not handed to node:http). */
  get size(): number {
    return this.connections.size;
  }

  toNodeHttp(socket: Socket): void {
    this.nodeHttp(socket);
  }

  /** Where a connection handed off goes: HTTP/2 when it opens with the preface and h2c is on, else node:http. */
  handOff(socket: Socket, pending: string): void {
    if (this.h2c !== undefined && pending.startsWith(H2_PREFACE_HEAD)) this.h2c(socket);
    else this.nodeHttp(socket);
  }

  forget(c: FrontConnection<C>): void {
    this.connections.delete(c);
  }

  /** Graceful close: idle connections close now, busy ones after their answer (which says `Connection: close`). */
  closeIdle(): void {
    this.closing = true;
    for (const c of this.connections) if (c.idle) c.socket.end();
  }

  /** The grace is over: every connection the front reads is cut. */
  closeAll(): void {
    for (const c of this.connections) c.socket.destroy();
  }
}

import { STATUS_CODES, type Server } from 'node:http';
import type { Socket } from 'node:net';
import type { HeaderMap } from '../domain/route-key.js';
import type { Logger } from '../observability/logger.js';
import { isAuthzPath, type AuthzReply, type AuthzSink, type HttpAuthz } from './http-authz.js';

/**
 * The admin port's front for HTTP authz: it reads each connection's requests itself while they have the
 * one shape Envoy's `http_service` and nginx's `auth_request` (with `proxy_http_version 1.1`) send — an
 * HTTP/1.1 request for `/authz…` with no body, each header once — and answers them from the decision
 * without node:http's request and response objects, which cost more per request than the whole decision
 * (docs/benchmarks.md).
 *
 * Anything else it does not judge: at the first request of any other shape (another path, a body,
 * `Transfer-Encoding`, `Expect`, `Upgrade`, HTTP/1.0, a repeated or malformed header, bytes outside
 * visible ASCII, a head past 16 KiB) it hands the connection, that request and everything after it, to
 * node:http for good, which answers or refuses it as it always has. So every malformed input still meets
 * node:http's parser; this front only ever answers requests it has fully read and found well-formed.
 *
 * Requests on one connection are answered in order, one at a time (a readiness wait holds the next).
 */

/** Node's default limit on a request head (`--max-http-header-size`); a longer one goes to node:http, which answers 431. */
export const MAX_HEAD_BYTES = 16 * 1024;
/** More header lines than any authz request carries: past it, node:http reads the request. */
export const MAX_HEADERS = 100;

/** What must never reach a response header value from a decision (it cannot, by construction: checked anyway, as node:http's writeHead does). */
const HEAD_BREAK = /[\r\n]/;

export interface ParsedHead {
  readonly method: string;
  readonly url: string;
  /** Lower-case names, each present once. */
  readonly headers: HeaderMap;
  /** `Connection: close`: answer, then close. */
  readonly close: boolean;
}

/** The request line this front reads: a method of capitals, a target of visible ASCII, HTTP/1.1. */
const REQUEST_LINE = /^[A-Z]{1,16} [\x21-\x7e]+ HTTP\/1\.1\r\n/;
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
 * byte) when it is one this front answers; undefined when node:http must read it.
 */
export function parseAuthzHead(text: string, end: number): ParsedHead | undefined {
  if (!REQUEST_LINE.test(text)) return undefined;
  const sp1 = text.indexOf(' ');
  const sp2 = text.indexOf(' ', sp1 + 1);
  const url = text.slice(sp1 + 1, sp2);
  if (!isAuthzPath(url)) return undefined;
  const first = sp2 + 11;
  if (first < end + 2 && !FIELD_LINES.test(text.slice(first, end + 2))) return undefined;
  // A plain object, as node:http's req.headers is: a name the prototype has (`constructor`) reads as
  // already present, so such a request goes to node:http.
  const headers: Record<string, string> = {};
  let count = 0;
  for (let pos = first; pos < end; ) {
    const colon = text.indexOf(':', pos);
    const eol = text.indexOf('\r\n', colon);
    const name = text.slice(pos, colon).toLowerCase();
    let from = colon + 1;
    let to = eol;
    while (from < to && isOws(text.charCodeAt(from))) from++;
    while (to > from && isOws(text.charCodeAt(to - 1))) to--;
    if (headers[name] !== undefined || ++count > MAX_HEADERS) return undefined;
    headers[name] = text.slice(from, to);
    pos = eol + 2;
  }
  if (headers.host === undefined || headers['transfer-encoding'] !== undefined || headers.expect !== undefined || headers.upgrade !== undefined) return undefined;
  const length = headers['content-length'];
  if (length !== undefined && length !== '0') return undefined;
  const connection = headers.connection?.toLowerCase();
  if (connection !== undefined && connection !== 'keep-alive' && connection !== 'close') return undefined;
  return { method: text.slice(0, sp1), url, headers, close: connection === 'close' };
}

/** `Date` as node:http writes it, formatted at most once a second. */
let dateSecond = -1;
let dateText = '';
function httpDate(): string {
  const now = Date.now();
  const second = Math.floor(now / 1000);
  if (second !== dateSecond) {
    dateSecond = second;
    dateText = new Date(now).toUTCString();
  }
  return dateText;
}

/** One connection the front reads. Requests are answered one at a time, in order. */
class FrontConnection implements AuthzSink {
  /** Unread bytes, as latin1 text (one character per byte: what is handed back to node:http is the same bytes). */
  private pending = '';
  /** A request is being answered (a readiness wait may hold it); what arrives meanwhile waits in `pending`. */
  private busy = false;
  /** Inside drain()'s loop: an answer sent synchronously lets the loop go on rather than recursing. */
  private draining = false;
  private method = '';
  private closeAfter = false;
  /** The client finished sending (half-close). */
  private ended = false;
  private aborts: AbortController | undefined;
  private readonly onData = (chunk: Buffer): void => {
    const text = chunk.toString('latin1');
    this.pending = this.pending.length === 0 ? text : this.pending + text;
    if (!this.busy) this.drain();
    // A client that keeps sending while its request waits is read no further than one more head.
    else if (this.pending.length > MAX_HEAD_BYTES) this.socket.pause();
  };
  // As node:http does (no half-open connections): a request still waiting when the client stops sending
  // is abandoned, and the connection closed. What arrived before the end was answered as it was read.
  private readonly onEnd = (): void => {
    this.ended = true;
    this.aborts?.abort();
    this.socket.end();
  };
  // Idle past the keep-alive timeout: closed. A request in a readiness wait is not idle (the wait has its own bound).
  private readonly onTimeout = (): void => {
    if (!this.busy) this.socket.destroy();
  };
  private readonly onError = (): void => {
    this.socket.destroy();
  };

  constructor(
    readonly socket: Socket,
    private readonly front: AuthzFront,
  ) {
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
    });
  }

  get idle(): boolean {
    return !this.busy;
  }

  signal(): AbortSignal {
    this.aborts ??= new AbortController();
    if (this.socket.destroyed) this.aborts.abort();
    return this.aborts.signal;
  }

  send(r: AuthzReply): void {
    if (!this.socket.destroyed) {
      const close = this.closeAfter || this.ended || this.front.closing;
      let head = 'HTTP/1.1 ' + r.status + ' ' + (STATUS_CODES[r.status] ?? '') + '\r\n';
      let values = '';
      for (let i = 0; i < r.head.length; i += 2) {
        const value = r.head[i + 1]!;
        head += r.head[i] + ': ' + value + '\r\n';
        values += value;
      }
      if (HEAD_BREAK.test(values)) {
        this.socket.destroy();
        return;
      }
      head += 'Date: ' + httpDate() + (close ? '\r\nConnection: close\r\n\r\n' : this.front.keepAliveHeader);
      this.socket.write(this.method === 'HEAD' ? head : head + r.body);
      if (close) this.socket.end();
    }
    this.busy = false;
    this.aborts = undefined;
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
        if (this.pending.length > MAX_HEAD_BYTES) this.handOff();
        break;
      }
      const req = end <= MAX_HEAD_BYTES ? parseAuthzHead(this.pending, end) : undefined;
      if (req === undefined) {
        this.handOff();
        break;
      }
      this.pending = this.pending.slice(end + 4);
      this.busy = true;
      this.method = req.method;
      this.closeAfter = req.close;
      try {
        this.front.authz.handleParsed(req.url, req.headers, this);
      } catch (err) {
        // A bug while answering: this request gets no answer, so the connection cannot go on.
        this.front.log.error({ err }, 'answering an HTTP authz request failed');
        this.socket.destroy();
      }
    }
    this.draining = false;
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
    if (this.pending.length > 0) s.unshift(Buffer.from(this.pending, 'latin1'));
    this.pending = '';
    this.front.toNodeHttp(s);
  }
}

/**
 * Installs the front on `server` (an http.Server, before it listens): the server's own connection
 * handling becomes the hand-off target, and every new connection starts with the front.
 */
export class AuthzFront {
  readonly keepAliveHeader: string;
  readonly keepAliveTimeoutMs: number;
  /** Set by closeIdle(): answers in flight then say `Connection: close`. */
  closing = false;
  private readonly connections = new Set<FrontConnection>();
  private readonly nodeHttp: (socket: Socket) => void;

  constructor(
    server: Server,
    readonly authz: HttpAuthz,
    readonly log: Logger,
  ) {
    const own = server.listeners('connection');
    if (own.length !== 1) throw new Error(`the admin server has ${own.length} connection listeners; the authz front expects node:http's one`);
    const nodeHttp = own[0] as (socket: Socket) => void;
    this.nodeHttp = (socket) => nodeHttp.call(server, socket);
    this.keepAliveTimeoutMs = server.keepAliveTimeout;
    this.keepAliveHeader = `\r\nConnection: keep-alive\r\nKeep-Alive: timeout=${Math.floor(server.keepAliveTimeout / 1000)}\r\n\r\n`;
    server.removeListener('connection', nodeHttp);
    server.on('connection', (socket: Socket) => this.connections.add(new FrontConnection(socket, this)));
  }

  /** Connections the front reads now (not handed to node:http). */
  get size(): number {
    return this.connections.size;
  }

  toNodeHttp(socket: Socket): void {
    this.nodeHttp(socket);
  }

  forget(c: FrontConnection): void {
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

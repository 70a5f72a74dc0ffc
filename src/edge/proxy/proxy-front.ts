import { EventEmitter } from 'node:events';
import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import type { ClientRequest, ClientResponse } from '../forwarding/client-side.js';
import { BAD_HEADER_VALUE, httpDate, type FrontConnection, type FrontHandler } from '../http-front.js';

/**
 * The embedded proxy's front (http-front.ts): it reads bodyless GET and HEAD requests itself and writes
 * their responses onto the socket as node:http would — the same head lines in the same order (the
 * sandbox's headers as given, then `Date` unless the sandbox sent one, `Connection` and `Keep-Alive`,
 * then the body's framing: its `Content-Length`, or `Transfer-Encoding: chunked` with the chunks framed
 * here), no body for HEAD, 204 and 304 — without node:http's request and response objects. Every other
 * request (a body, an upgrade, any other method or shape) is read by node:http as before.
 */

/** What no header name may hold (node:http's writeHead refuses the same). */
const BAD_NAME = /[^!#$%&'*+.^_`|~0-9A-Za-z-]/;

/** A response written straight onto a front connection: the subset of ServerResponse the proxy uses. */
export class FrontResponse extends EventEmitter implements ClientResponse {
  headersSent = false;
  writableFinished = false;
  private status = 200;
  /** The sandbox's header lines, each with its CRLF. */
  private lines = '';
  private hasLength = false;
  private hasDate = false;
  private chunked = false;
  /** Trailer field lines (an h2c sandbox's trailers), sent after the last chunk. */
  private trailers = '';
  /** No body bytes go out: HEAD, 204, 304. */
  private bodyless: boolean;
  private close = false;
  private closed = false;
  private waitingDrain = false;
  private readonly drained = (): void => {
    this.waitingDrain = false;
    this.emit('drain');
  };

  constructor(
    private readonly conn: FrontConnection<unknown>,
    headRequest: boolean,
  ) {
    super();
    this.bodyless = headRequest;
    conn.gone = () => this.closeOnce();
  }

  get destroyed(): boolean {
    return this.conn.socket.destroyed;
  }

  /** Checks the head as node:http's writeHead does (throwing, so no byte is written); it goes out with the first write. */
  writeHead(status: number, headers: string[]): this {
    let lines = '';
    let names = '';
    let values = '';
    for (let i = 0; i < headers.length; i += 2) {
      const name = headers[i]!;
      const value = headers[i + 1]!;
      lines += name + ': ' + value + '\r\n';
      names += name;
      values += value;
      if (name.length === 14) this.hasLength ||= name.toLowerCase() === 'content-length';
      else if (name.length === 4) this.hasDate ||= name.toLowerCase() === 'date';
    }
    if (BAD_NAME.test(names) || BAD_HEADER_VALUE.test(values)) throw new Error('a response header holds a byte no header may hold');
    if (!Number.isInteger(status) || status < 100 || status > 999) throw new RangeError(`invalid status code ${status}`);
    this.status = status;
    this.lines = lines;
    if (status === 204 || status === 304) this.bodyless = true;
    return this;
  }

  flushHeaders(): void {
    if (!this.headersSent) this.sendHead();
  }

  write(chunk: Buffer): boolean {
    if (!this.headersSent) this.sendHead();
    const socket = this.conn.socket;
    if (this.bodyless || chunk.length === 0 || socket.destroyed) return true;
    corkThisTick(socket);
    let ok: boolean;
    if (this.chunked) {
      socket.write(chunk.length.toString(16) + '\r\n', 'latin1');
      socket.write(chunk);
      ok = socket.write('\r\n', 'latin1');
    } else ok = socket.write(chunk);
    if (!ok && !this.waitingDrain) {
      this.waitingDrain = true;
      socket.once('drain', this.drained);
    }
    return ok;
  }

  /** Trailer fields for a chunked body (RFC 9112 §7.1.2); a value no field may hold leaves that field out. */
  addTrailers(fields: Readonly<Record<string, string | number | readonly string[] | undefined>>): void {
    for (const name in fields) {
      const v = fields[name];
      if (v === undefined || BAD_NAME.test(name)) continue;
      for (const one of Array.isArray(v) ? v : [String(v)]) if (!BAD_HEADER_VALUE.test(one)) this.trailers += `${name}: ${one}\r\n`;
    }
  }

  end(body?: string): this {
    if (this.writableFinished) return this;
    const socket = this.conn.socket;
    if (!this.headersSent) this.sendHead();
    if (!socket.destroyed) {
      if (body !== undefined && body.length > 0 && !this.bodyless) {
        if (this.chunked) socket.write(Buffer.byteLength(body).toString(16) + '\r\n' + body + '\r\n');
        else socket.write(body);
      }
      if (this.chunked) socket.write('0\r\n' + this.trailers + '\r\n', 'latin1');
    }
    this.writableFinished = true;
    this.closeOnce();
    this.conn.done(this.close);
    return this;
  }

  destroy(): this {
    this.conn.socket.destroy();
    return this;
  }

  /**
   * The head, as node:http sends it with the first body bytes. Its framing is settled by the headers alone,
   * as node:http settles it for a head given to writeHead as a list: the sandbox's `Content-Length`, or
   * chunks — also for a body end() carries (the proxy's denials give their length).
   */
  private sendHead(): void {
    this.headersSent = true;
    let head = 'HTTP/1.1 ' + this.status + ' ' + (STATUS_CODES[this.status] ?? 'unknown') + '\r\n' + this.lines;
    if (!this.hasDate) head += 'Date: ' + httpDate() + '\r\n';
    this.close = this.conn.closing;
    head += this.conn.connectionLines(this.close);
    if (!this.hasLength && !this.bodyless) {
      this.chunked = true;
      head += 'Transfer-Encoding: chunked\r\n';
    }
    const socket = this.conn.socket;
    if (socket.destroyed) return;
    corkThisTick(socket);
    socket.write(head + '\r\n', 'latin1');
  }

  private closeOnce(): void {
    if (this.closed) return;
    this.closed = true;
    this.emit('close');
  }
}

/**
 * Corks the socket to the end of this tick, as node:http does for each write: the head and the body bytes
 * that follow it at once (a chunk and its framing; the chunks one read of the upstream gave) go out in one
 * write.
 */
function corkThisTick(socket: Socket): void {
  if (socket.writableCorked > 0) return;
  socket.cork();
  process.nextTick(uncork, socket);
}

function uncork(socket: Socket): void {
  socket.uncork();
}

/** Bodyless requests only: a GET or HEAD with a body (or any other method) goes to node:http. */
const acceptsBodyless = (method: string): boolean => method === 'GET' || method === 'HEAD';

/** The proxy's handler for the front: each request becomes a ClientRequest and a FrontResponse (`secure`: on the TLS port). */
export function proxyFrontHandler(carry: (req: ClientRequest, res: FrontResponse) => void, secure = false): FrontHandler<FrontConnection<unknown>> {
  return {
    accepts: acceptsBodyless,
    connect: (conn) => conn,
    handle(req, conn) {
      const res = new FrontResponse(conn, req.method === 'HEAD');
      carry({ method: req.method, url: req.url, headers: req.headers, rawHeaders: req.rawHeaders, clientIp: conn.socket.remoteAddress ?? '', body: null, secure }, res);
    },
  };
}

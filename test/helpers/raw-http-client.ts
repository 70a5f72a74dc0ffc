import { connect, type Socket } from 'node:net';

/**
 * A raw HTTP/1.1 client for wire-level tests: it writes exactly the bytes it is given (latin1 strings, one
 * character per byte, or Buffers) and reads responses off the wire itself, so what a server sends — head
 * lines in their order, case and repeats, chunk framing, a body delimited by the close — can be asserted
 * byte for byte. It does not depend on node:http's client parser, which would hide all of that.
 */

/** One HTTP/1.x response as read off the wire. Strings are latin1: one character per byte. */
export interface Answer {
  readonly status: number;
  /** The status line as sent (`HTTP/1.1 200 OK`). */
  readonly statusLine: string;
  /** The field lines as sent, in order, without their CRLF. */
  readonly lines: readonly string[];
  /** The fields as [name, value] in order: names as sent, values without surrounding blanks. */
  readonly fields: readonly (readonly [string, string])[];
  /** Lower-case names; a repeated one keeps its last value (use `fields` or `all()` for repeats). */
  readonly headers: Record<string, string>;
  /** The body as the application sees it (chunked framing decoded). */
  readonly body: string;
  /** The body bytes as they were on the wire (chunk sizes, CRLFs and the last chunk included). */
  readonly wire: string;
  /** How the body was delimited. */
  readonly framing: 'none' | 'length' | 'chunked' | 'close';
}

/** Every value of `name` (any case) in `a`, in order. */
export function all(a: Answer, name: string): string[] {
  const lower = name.toLowerCase();
  return a.fields.filter(([n]) => n.toLowerCase() === lower).map(([, v]) => v);
}

/** Statuses that never carry a body (RFC 9112 §6.3). */
function bodyless(status: number): boolean {
  return (status >= 100 && status < 200) || status === 204 || status === 304;
}

export class RawClient {
  private buf = '';
  private closed = false;
  private readonly waiters: (() => void)[] = [];
  readonly socket: Socket;
  /** Resolves once the TCP connection is up (writes before it are queued, and may go out together). */
  readonly connected: Promise<void>;

  constructor(port: number, host = '127.0.0.1') {
    this.socket = connect(port, host);
    this.socket.setNoDelay(true);
    this.socket.setEncoding('latin1');
    this.connected = new Promise((resolve) => this.socket.once('connect', () => resolve()));
    this.socket.on('data', (d: string) => {
      this.buf += d;
      this.wake();
    });
    this.socket.on('close', () => {
      this.closed = true;
      this.wake();
    });
    this.socket.on('error', () => undefined);
  }

  private wake(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  private next(): Promise<void> {
    return new Promise<void>((r) => this.waiters.push(r));
  }

  write(s: string | Buffer): void {
    if (typeof s === 'string') this.socket.write(s, 'latin1');
    else this.socket.write(s);
  }

  /** The connection closed (either side). */
  get ended(): boolean {
    return this.closed;
  }

  /** Bytes received and not yet taken by read(), as latin1. */
  get unread(): string {
    return this.buf;
  }

  /**
   * The next response, or undefined when the connection closed before a complete one (a truncated
   * response included: see `unread` for what came). `head`: the request was HEAD (no body follows).
   */
  async read(head = false): Promise<Answer | undefined> {
    for (;;) {
      const a = this.take(head);
      if (a !== undefined) return a;
      if (this.closed) return undefined;
      await this.next();
    }
  }

  /** Resolves when the connection has closed. */
  async closedByServer(): Promise<void> {
    while (!this.closed) await this.next();
  }

  /** Resolves with the unread bytes once `pred` holds for them, or the connection closed. */
  async until(pred: (unread: string) => boolean): Promise<string> {
    while (!pred(this.buf) && !this.closed) await this.next();
    return this.buf;
  }

  private take(head: boolean): Answer | undefined {
    const end = this.buf.indexOf('\r\n\r\n');
    if (end < 0) return undefined;
    const [statusLine, ...lines] = this.buf.slice(0, end).split('\r\n') as [string, ...string[]];
    const status = Number(statusLine.split(' ')[1]);
    const fields: [string, string][] = [];
    const headers: Record<string, string> = {};
    for (const l of lines) {
      const c = l.indexOf(':');
      const field: [string, string] = [l.slice(0, c), l.slice(c + 1).trim()];
      fields.push(field);
      headers[field[0].toLowerCase()] = field[1];
    }
    const rest = this.buf.slice(end + 4);
    const answer = (framing: Answer['framing'], body: string, wire: string, used: number): Answer => {
      this.buf = rest.slice(used);
      return { status, statusLine, lines, fields, headers, body, wire, framing };
    };
    if (head || bodyless(status)) return answer('none', '', '', 0);
    if (headers['transfer-encoding'] !== undefined && /(^|,)\s*chunked\s*$/i.test(headers['transfer-encoding'])) {
      let body = '';
      for (let i = 0; ; ) {
        const nl = rest.indexOf('\r\n', i);
        if (nl < 0) return undefined;
        const n = parseInt(rest.slice(i, nl), 16);
        if (Number.isNaN(n)) throw new Error(`bad chunk size line ${JSON.stringify(rest.slice(i, nl))}`);
        if (n === 0) {
          // Trailer fields, then the blank line.
          const blank = rest.indexOf('\r\n\r\n', nl);
          if (rest.startsWith('\r\n', nl + 2)) return answer('chunked', body, rest.slice(0, nl + 4), nl + 4);
          if (blank < 0) return undefined;
          return answer('chunked', body, rest.slice(0, blank + 4), blank + 4);
        }
        if (rest.length < nl + 2 + n + 2) return undefined;
        if (rest.slice(nl + 2 + n, nl + 4 + n) !== '\r\n') throw new Error('a chunk not followed by CRLF');
        body += rest.slice(nl + 2, nl + 2 + n);
        i = nl + 4 + n;
      }
    }
    if (headers['content-length'] !== undefined) {
      const n = Number(headers['content-length']);
      if (rest.length < n) return undefined;
      return answer('length', rest.slice(0, n), rest.slice(0, n), n);
    }
    // Neither: the body runs to the close of the connection (RFC 9112 §6.3, rule 8).
    if (!this.closed) return undefined;
    return answer('close', rest, rest, rest.length);
  }

  close(): void {
    this.socket.destroy();
  }
}

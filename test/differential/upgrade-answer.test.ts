import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { forwardResponseHeaders } from '../../src/edge/forwarding/forward-headers.js';
import { ChunkedEnd, MALFORMED, readAnswerHead, type AnswerHead } from '../../src/edge/forwarding/answer-framing.js';
import { spliceUpgrade, tcpConnect, type Pipe } from '../../src/edge/forwarding/websocket-tunnel.js';
import { fuzzPlan } from '../helpers/fuzz.js';
import { llhttpResponse } from '../helpers/llhttp.js';

/**
 * The hand-written HTTP/1.1 of the Upgrade path (src/edge/forwarding/websocket-tunnel.ts) against
 * node:http's own parser, llhttp: the reader of the upstream's answer head (readAnswerHead), the finder of
 * a chunked body's end (ChunkedEnd), and the declined answer the client is given (a head written by hand,
 * then the body as its framing bounds it). Generated and mutated heads and chunked bodies, fed in random
 * pieces; generated answers through a real proxy on loopback, read by llhttp once directly and once as
 * the client gets them.
 */

const plan = fuzzPlan(300, 0x0a11ce);
const r = plan.random;
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
const chance = (p: number): boolean => r() < p;
const token = (n: number): string => Array.from({ length: n }, () => pick([...'abcdefghijklmnopqrstuvwxyz-0123456789'])).join('');
const latin1 = (s: string): Buffer => Buffer.from(s, 'latin1');

/** Every byte class a head can hold. */
const CLASSES = ["!#$%&'*+-.^_`|~09AZaz", '"(),/:;<=>?@[\\]{}', ' ', '\t', '\x00', '\x01\x08\x0b\x0c\x1f', '\r', '\n', '\x7f', '\x80\xa0\xe9\xff'];
const byteOfAnyClass = (): string => pick([...pick(CLASSES)]);

/** `s` with one byte of any class put in, replacing one or not. */
function mutate(s: string): string {
  const at = Math.floor(r() * (s.length + 1));
  return s.slice(0, at) + byteOfAnyClass() + s.slice(chance(0.5) ? at + 1 : at);
}

/** Random cut points in `length` bytes, in order. */
function cuts(length: number): number[] {
  return Array.from({ length: Math.floor(r() * 5) }, () => Math.floor(r() * length)).sort((a, b) => a - b);
}

function pieces(bytes: Buffer): Buffer[] {
  const out: Buffer[] = [];
  let from = 0;
  for (const c of [...cuts(bytes.length), bytes.length]) {
    out.push(bytes.subarray(from, c));
    from = c;
  }
  return out.filter((b) => b.length > 0);
}

function statusLine(): string {
  const line = chance(0.8) ? `HTTP/1.1 ${pick(['101', '200', '204', '301', '400', '403', '426', '500'])}${pick([' OK', ' Switching Protocols', '', ' ', ' Not  Found'])}` : pick(['HTTP/1.0 200 OK', 'HTTP/1.2 200 OK', 'HTTP/2.0 200 OK', 'http/1.1 200 OK', 'HTTP/1.1 20 OK', 'HTTP/1.1 2000 OK', 'HTTP/1.1  200 OK', 'HTTP/1.1 200\tOK', 'ICY 200 OK']);
  return chance(0.15) ? mutate(line) : line;
}

function fieldLine(): string {
  const line = chance(0.7)
    ? `${pick(['Upgrade', 'Connection', 'Content-Length', 'Sec-WebSocket-Accept', 'x-' + token(1 + Math.floor(r() * 6))])}:${pick([' ', '', '  ', '\t'])}${token(Math.floor(r() * 12))}${pick(['', ' ', '\t'])}`
    : pick([': no-name', 'no-colon', 'x-a : spaced', ' x-folded: 1', '\tx: 1', 'x-a: 1\nx-b: 2', 'x-a: a\rb', 'x-a: caf\xe9', 'x-a: \x7f', 'x-a:', `x-long: ${'v'.repeat(Math.floor(r() * 17000))}`]);
  return chance(0.2) ? mutate(line) : line;
}

/** A head as an upstream may send it, with bytes after it. */
function answerHead(): Buffer {
  const lines = [statusLine(), ...Array.from({ length: Math.floor(r() * 6) }, fieldLine)];
  return latin1(lines.join('\r\n') + '\r\n\r\n' + (chance(0.5) ? '' : pick(['\x81\x05hello', 'HTTP/1.1 200 OK\r\n\r\n', token(20)])));
}

/** readAnswerHead over a pipe fed `bytes` in pieces; then the pipe ends. */
function readHead(bytes: Buffer): Promise<{ answer: AnswerHead | undefined; rest: Buffer } | 'none'> {
  return new Promise((resolve) => {
    const pipe = new PassThrough() as unknown as Pipe;
    let read = false;
    readAnswerHead(pipe, (answer, rest) => {
      read = true;
      // The bytes after the head: those read with it, then those still in the pipe (it was paused).
      const after: Buffer[] = [Buffer.from(rest)];
      pipe.on('data', (d: Buffer) => after.push(d));
      pipe.once('end', () => resolve({ answer, rest: Buffer.concat(after) }));
      pipe.resume();
    });
    pipe.once('end', () => read || resolve('none'));
    for (const p of pieces(bytes)) pipe.write(p);
    pipe.end();
    pipe.resume();
  });
}

/** A chunked body as an upstream may send it (valid, or with something out of line), and bytes after it. */
function chunkedBody(): string {
  const parts: string[] = [];
  const n = Math.floor(r() * 4);
  for (let i = 0; i < n; i++) {
    const size = pick([1, 2, 10, 15, 16, 255, 300, 4096]);
    const hex = pick([size.toString(16), size.toString(16).toUpperCase(), '00' + size.toString(16)]);
    const ext = chance(0.2) ? pick([';a=b', ';a', '; a=b', ';a="q"']) : '';
    parts.push(`${hex}${ext}\r\n${'d'.repeat(size)}\r\n`);
  }
  parts.push(`${pick(['0', '000'])}${chance(0.1) ? ';x=y' : ''}\r\n`);
  if (chance(0.3)) parts.push(`${pick(['Expires', 'x-trailer', 'Server-Timing'])}: ${token(6)}\r\n`);
  parts.push('\r\n');
  let body = parts.join('');
  if (chance(0.4)) body = mutate(body);
  if (chance(0.1)) body = body.slice(0, Math.floor(r() * body.length));
  return body + pick(['', 'HTTP/1.1 200 OK\r\n\r\n', 'junk', '\r\n']);
}

/** ChunkedEnd's answer for `body` fed in pieces: the end's offset in `body`, MALFORMED, or undefined. */
function chunkedEnd(body: Buffer): number | undefined {
  const c = new ChunkedEnd();
  let from = 0;
  for (const p of pieces(body)) {
    const end = c.feed(p);
    if (end === MALFORMED) return MALFORMED;
    if (end !== undefined) return from + end;
    from += p.length;
  }
  return undefined;
}

describe(`the Upgrade path's HTTP/1.1 against llhttp (seed ${plan.seed}, ${plan.runs} cases per test)`, () => {
  it('readAnswerHead: a head llhttp reads is read the same (status, fields as sent, the bytes after it); a head llhttp refuses is refused, and so is another version than HTTP/1.x', async () => {
    for (let run = 0; run < plan.runs; run++) {
      const bytes = answerHead();
      const ll = llhttpResponse(bytes, { head: true });
      const got = await readHead(bytes);
      const why = `seed ${plan.seed}, run ${run}: ${JSON.stringify(bytes.toString('latin1').slice(0, 300))}; llhttp ${JSON.stringify({ head: ll.head, error: ll.error }).slice(0, 300)}`;
      // Stricter than llhttp in three ways: an answer on an HTTP/1.1 connection is HTTP/1.x (llhttp reads
      // `HTTP/2.0 200` too), it starts with its status line (llhttp skips CR and LF before it), and its
      // 16 KiB limit counts every byte of the head (llhttp's, the bytes of the fields only).
      if (ll.head !== undefined && ll.headEnd !== undefined && /^1\.[01]$/.test(ll.head.version) && bytes[0] !== 0x0d && bytes[0] !== 0x0a && ll.headEnd <= 16 * 1024) {
        expect(got, why).not.toBe('none');
        const { answer, rest: after } = got as { answer: AnswerHead; rest: Buffer };
        expect(answer, why).toBeDefined();
        expect([answer.status, answer.raw, answer.bytes.length], why).toEqual([ll.head.status, ll.head.raw, ll.headEnd]);
        expect(after.equals(bytes.subarray(ll.headEnd)), why).toBe(true);
      } else if (got !== 'none') {
        expect(got.answer, why).toBeUndefined();
      }
    }
  });

  it('ChunkedEnd: the body ends where llhttp ends the message; what llhttp refuses is MALFORMED', () => {
    const head = latin1('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n');
    for (let run = 0; run < plan.runs; run++) {
      const body = latin1(chunkedBody());
      const ll = llhttpResponse(Buffer.concat([head, body]));
      const end = chunkedEnd(body);
      const why = `seed ${plan.seed}, run ${run}: ${JSON.stringify(body.toString('latin1').slice(0, 300))}; llhttp ${JSON.stringify({ end: ll.end, error: ll.error })}`;
      if (ll.end !== undefined) expect(end, why).toBe(ll.end - head.length);
      else if (ll.error !== undefined) expect(end, why).toBe(MALFORMED);
      else expect(end, why).toBeUndefined();
    }
  });
});

/** An answer an upstream may give to an Upgrade request it declines, with the request's method. */
function declined(): { method: string; bytes: Buffer } {
  const method = chance(0.15) ? 'HEAD' : 'GET';
  const status = pick([200, 204, 301, 304, 400, 403, 404, 426, 500, 503]);
  const fields: string[] = [];
  for (let i = Math.floor(r() * 4); i > 0; i--) fields.push(`x-${token(1 + Math.floor(r() * 5))}: ${token(Math.floor(r() * 10))}`);
  if (chance(0.3)) fields.push(pick(['Connection: x-hop', 'Connection: close', 'Connection: keep-alive', 'Keep-Alive: timeout=5', 'Upgrade: websocket']), 'x-hop: dropped');
  const body = Array.from({ length: pick([0, 1, 17, 300, 5000]) }, () => String.fromCharCode(Math.floor(r() * 256))).join('');
  const framing = pick(['length', 'chunked', 'close']);
  let wire = body;
  if (framing === 'length') fields.push(`Content-Length: ${body.length}`);
  else if (framing === 'chunked') {
    fields.push('Transfer-Encoding: chunked');
    wire = '';
    for (let at = 0; at < body.length; ) {
      const n = 1 + Math.floor(r() * 2000);
      const chunk = body.slice(at, at + n);
      wire += `${chunk.length.toString(16)}\r\n${chunk}\r\n`;
      at += chunk.length;
    }
    wire += `0\r\n${chance(0.3) ? 'x-trailer: t\r\n' : ''}\r\n`;
  }
  const bodyless = method === 'HEAD' || status === 204 || status === 304;
  return { method, bytes: latin1(`HTTP/1.1 ${status} ${pick(['Whatever', 'OK', ''])}\r\n${fields.map((f) => f + '\r\n').join('')}\r\n${bodyless ? '' : wire}`) };
}

describe(`a declined upgrade, through a proxy on loopback, against llhttp (seed ${plan.seed})`, () => {
  let upstream: Server;
  let proxy: HttpServer;
  /** The answer the upstream gives next. */
  let next: Buffer = Buffer.alloc(0);
  const runs = Math.max(1, Math.floor(plan.runs / 3));

  beforeAll(async () => {
    upstream = createServer((s: Socket) => {
      s.on('error', () => undefined);
      let seen = '';
      const onData = (d: Buffer): void => {
        seen += d.toString('latin1');
        if (!seen.includes('\r\n\r\n')) return;
        s.off('data', onData);
        // The answer, and a close that bounds a body without a length.
        s.end(next);
      };
      s.on('data', onData);
    });
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    const target = `127.0.0.1:${(upstream.address() as AddressInfo).port}`;
    proxy = createHttpServer();
    proxy.on('upgrade', (req, socket: Socket, head: Buffer) => {
      spliceUpgrade(req, socket, head, req.url ?? '/', ['host', 'sandbox', 'connection', 'upgrade', 'upgrade', 'websocket'], tcpConnect(target, 5000), 10_000, () => socket.destroy());
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
  });
  afterAll(async () => {
    await new Promise((resolve) => proxy.close(resolve));
    await new Promise((resolve) => upstream.close(resolve));
  });

  /** Everything the proxy sends a client for one upgrade request, until it closes. */
  function throughProxy(method: string): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      const c = connect((proxy.address() as AddressInfo).port, '127.0.0.1');
      const got: Buffer[] = [];
      c.on('data', (d: Buffer) => got.push(d));
      c.on('close', () => resolve(Buffer.concat(got)));
      c.on('error', reject);
      c.write(`${method} /ws HTTP/1.1\r\nHost: sandbox\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n`);
    });
  }

  it('the client reads the same status, end-to-end fields and body as llhttp reads from the upstream, with Connection: close', async () => {
    for (let run = 0; run < runs; run++) {
      const { method, bytes } = declined();
      next = bytes;
      const head = method === 'HEAD';
      const direct = llhttpResponse(bytes, { head, closed: true });
      const passed = await throughProxy(method);
      const seen = llhttpResponse(passed, { head, closed: true });
      const why = `seed ${plan.seed}, run ${run}: ${method}; ${passed.length} bytes of ${bytes.length}; upstream ${JSON.stringify(bytes.toString('latin1').slice(0, 300))}; client got ${JSON.stringify(passed.toString('latin1').slice(0, 300))}`;
      expect(direct.error, why).toBeUndefined();
      expect(seen.error, why).toBeUndefined();
      expect(seen.end, why).toBe(passed.length);
      expect(seen.head?.status, why).toBe(direct.head?.status);
      // The end-to-end fields (hop-by-hop ones and those Connection names dropped): the same, in order.
      expect(pairs(forwardResponseHeaders(seen.head!.raw)), why).toEqual(pairs(forwardResponseHeaders(direct.head!.raw)));
      expect(pairs(seen.head!.raw).filter(([n]) => n.toLowerCase() === 'connection'), why).toEqual([['Connection', 'close']]);
      expect(seen.body.equals(direct.body), why).toBe(true);
    }
  });
});

function pairs(raw: readonly string[]): [string, string][] {
  const out: [string, string][] = [];
  for (let i = 0; i < raw.length; i += 2) out.push([raw[i]!, raw[i + 1]!]);
  return out;
}

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_HEAD_BYTES, MAX_HEADERS } from '../../src/edge/http-front.js';
import { startFrontOverUpstream, type FrontOverUpstream } from '../helpers/front-proxy.js';
import { fuzzPlan } from '../helpers/fuzz.js';
import { RawClient } from '../helpers/raw-http-client.js';

/**
 * The hand-written HTTP/1.1 front (src/edge/http-front.ts) against plain node:http, on the embedded proxy's
 * door. Generated and mutated request heads — methods, targets, versions, header names and values with a
 * byte of every class, heads around the size and count limits, pipelined pairs — go over raw sockets
 * twice: on a fresh connection (the front reads it) and after an OPTIONS request, which the front hands to
 * node:http, so node:http reads the same bytes. Both must get the same bytes back (but for `Date`): the
 * front either answers as node:http does or hands the connection over, and never accepts a head node:http
 * refuses. The sandbox echoes the request it saw, so a head the front reads differently shows too.
 */

const plan = fuzzPlan(150, 0x5eed44);

/** Every byte class a head can hold. */
const CLASSES: Record<string, string> = {
  tchar: "!#$%&'*+-.^_`|~09AZaz",
  separator: '"(),/:;<=>?@[\\]{}',
  space: ' ',
  tab: '\t',
  nul: '\x00',
  control: '\x01\x08\x0b\x0c\x1f',
  cr: '\r',
  lf: '\n',
  del: '\x7f',
  obsText: '\x80\xa0\xe9\xff',
};
const CLASS_NAMES = Object.keys(CLASSES);

const r = plan.random;
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
const chance = (p: number): boolean => r() < p;
const byteOfAnyClass = (): string => pick([...CLASSES[pick(CLASS_NAMES)]!]);
const token = (n: number): string => Array.from({ length: n }, () => pick([...'abcdefghijklmnopqrstuvwxyz-0123456789'])).join('');

/** `s` with one byte of any class put in, replacing one or not. */
function mutate(s: string): string {
  const at = Math.floor(r() * (s.length + 1));
  return s.slice(0, at) + byteOfAnyClass() + s.slice(chance(0.5) ? at + 1 : at);
}

function method(): string {
  return chance(0.6) ? pick(['GET', 'HEAD']) : pick(['POST', 'OPTIONS', 'get', 'GE', 'PUT', 'ABCDEFGHIJKLMNOPQ', 'CONNECT', mutate('GET')]);
}

function target(host: string): string {
  const base = pick(['/', '/a/b?c=d', `http://${host}/x`, '*', '/' + token(8), '//x', '/%2e%2e/']);
  return chance(0.3) ? mutate(base) : base;
}

function version(): string {
  return chance(0.85) ? 'HTTP/1.1' : pick(['HTTP/1.0', 'HTTP/1.2', 'HTTP/2.0', 'http/1.1', 'HTTP/1.1 ', 'HTTP/11']);
}

/**
 * Header lines (without the final blank line), each ending in CRLF unless mutated. No `Transfer-Encoding`
 * but chunked: node:http then reads the body to the close, and answers a request pipelined behind another
 * only once that body ends, so what comes back hangs on the client's timing, not on the parser.
 */
function fields(host: string): string {
  const lines: string[] = [];
  if (!chance(0.05)) lines.push(`${pick(['Host', 'host', 'HOST'])}:${pick([' ', '', '  ', '\t'])}${host}${pick(['', ' ', '\t'])}`);
  if (chance(0.05)) lines.push(`Host: ${pick([host, 'other.localhost'])}`);
  const n = Math.floor(r() * 4);
  for (let i = 0; i < n; i++) lines.push(`x-${token(1 + Math.floor(r() * 6))}: ${token(Math.floor(r() * 10))}`);
  if (chance(0.4))
    lines.push(
      pick([
        'Content-Length: 0',
        'Content-Length: 00',
        'Content-Length: ',
        'Content-Length: 0, 0',
        'Content-Length: 3',
        'Transfer-Encoding: chunked',
        'Connection: close',
        'Connection: Close',
        'Connection: keep-alive',
        'Connection: upgrade',
        'Connection: close, x',
        'Upgrade: websocket',
        'Expect: 100-continue',
        'constructor: x',
        '__proto__: x',
        'Keep-Alive: 5',
      ]),
    );
  if (chance(0.05)) for (let i = lines.length; i < MAX_HEADERS - 2 + Math.floor(r() * 4); i++) lines.push(`x-n${i}: ${i}`);
  if (chance(0.3) && lines.length > 0) {
    const i = Math.floor(r() * lines.length);
    const line = lines[i]!;
    const colon = line.indexOf(':');
    // A byte of some class in the name, around the colon, or in the value.
    lines[i] = pick([() => mutate(line.slice(0, colon)) + line.slice(colon), () => line.slice(0, colon) + byteOfAnyClass() + line.slice(colon), () => line.slice(0, colon + 1) + mutate(line.slice(colon + 1))])();
  }
  if (chance(0.05)) lines.push(pick([' folded', '\tfolded', 'no-colon', ': empty-name']));
  return lines.map((l) => l + '\r\n').join('');
}

/** One request head, its size sometimes brought to the head limit, give or take a few bytes. */
function head(host: string): string {
  let h = `${method()} ${target(host)} ${version()}\r\n${fields(host)}`;
  if (chance(0.08)) {
    const want = MAX_HEAD_BYTES + Math.floor(r() * 9) - 4;
    const pad = want - h.length - 'x-pad: \r\n'.length;
    if (pad > 0) h += `x-pad: ${'p'.repeat(pad)}\r\n`;
  }
  return h + '\r\n';
}

/**
 * A second head pipelined behind the first, of a kind whose answers hang on node:http's timing rather than
 * on which heads are read, left out: CONNECT or an upgrade (node:http hands the socket to its 'connect' or
 * 'upgrade' listener as soon as it parses one, and never writes the answer owed to the request ahead),
 * `Expect` (it writes `100 Continue` as soon as it parses the head, wherever the answer ahead has got to),
 * a body (it reads the closing request as that body, and at the framing error drops the answer ahead).
 */
function pipelined(host: string): string {
  for (;;) {
    const h = head(host);
    if (!/^CONNECT |upgrade|expect|transfer-encoding|content-length: *[^0\r]/i.test(h)) return h;
  }
}

/** node:http's own refusal of a head its parser rejects. */
const REFUSED = 'HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n';

/**
 * The same answers; or node:http refused a head (REFUSED ends one side) and the answers differ only in
 * what node:http itself does around a refusal in a pipeline: it writes REFUSED only when no answer is
 * going out yet, and it drops the answer still owed to the request ahead of the refused head. So: node:http's
 * answers before its refusal start the front's, and the front answered at most one request more — the one
 * ahead of the refused head, which the front had fully read and found well-formed. A front that took the
 * refused head would answer it and the closing request after it: two more.
 */
function sameAnswers(front: string, node: string): boolean {
  if (front === node) return true;
  const kept = (s: string): string => (s.endsWith(REFUSED) ? s.slice(0, -REFUSED.length) : s);
  const extra = kept(front).startsWith(kept(node)) ? kept(front).slice(kept(node).length) : undefined;
  return (front.endsWith(REFUSED) || node.endsWith(REFUSED)) && extra !== undefined && (extra.match(/HTTP\/1\.1 \d{3} /g) ?? []).length <= 1;
}

/** Heads the front once read though node:http refuses them: the target's first byte, a scheme, an authority. */
const REGRESSIONS = (host: string): string[] => ['}', 'a1://x/', `http://${host}"/x`].map((t) => `GET ${t} HTTP/1.1\r\nHost: ${host}\r\n\r\n`);

describe('differential: http-front against node:http, on the proxy door', () => {
  let door: FrontOverUpstream;

  beforeAll(async () => {
    door = await startFrontOverUpstream((req, res) => {
      req.resume();
      const seen = JSON.stringify([req.method, req.url, req.httpVersion, req.rawHeaders]);
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(seen) }).end(seen);
    });
  });
  afterAll(() => door.close());

  /**
   * Writes `bytes` on a new connection; all the server sent until it closed (cut after 3 s if it never does).
   * `first`: a request written, and answered, before them.
   */
  async function exchange(bytes: string, first?: string): Promise<string> {
    const c = new RawClient(door.proxy.port);
    if (first !== undefined) {
      c.write(first);
      // Answered before the rest goes out: node:http answers a malformed head with 400 only when no
      // response is still being written on the connection.
      await c.until((s) => s.includes(']]'));
    }
    c.write(bytes);
    const timer = setTimeout(() => c.socket.destroy(), 3000);
    await c.closedByServer();
    clearTimeout(timer);
    return c.unread.replace(/\r\nDate: [^\r]*/gi, '\r\nDate: -');
  }

  it(`${REGRESSIONS('').length} regressions and ${plan.runs} generated heads and pipelined pairs get node:http's answer (seed ${plan.seed})`, async () => {
    const OPTIONS = `OPTIONS /handoff HTTP/1.1\r\nHost: ${door.host}\r\n\r\n`;
    /** The OPTIONS answer ahead of the rest: its head and its Content-Length body. */
    const optionsAnswer = (s: string): number => {
      const end = s.indexOf('\r\n\r\n');
      const length = /\r\ncontent-length: (\d+)/i.exec(s.slice(0, end));
      return s.startsWith('HTTP/1.1 200 OK\r\n') && length !== null ? end + 4 + Number(length[1]) : -1;
    };
    const last = `GET /last HTTP/1.1\r\nHost: ${door.host}\r\nConnection: close\r\n\r\n`;
    let reachedSandbox = 0;
    const regressions = REGRESSIONS(door.host);
    for (let i = 0; i < regressions.length + plan.runs; i++) {
      const bytes = (regressions[i] ?? head(door.host) + (chance(0.3) ? pipelined(door.host) : '')) + last;
      const where = `seed ${plan.seed}, case ${i}: ${JSON.stringify(bytes.length > 600 ? bytes.slice(0, 300) + '…' + bytes.slice(-300) : bytes)}`;
      const front = await exchange(bytes);
      const node = await exchange(bytes, OPTIONS);
      const skip = optionsAnswer(node);
      expect(skip, where).toBeGreaterThan(0);
      expect(sameAnswers(front, node.slice(skip)), `${where}\nfront: ${JSON.stringify(front)}\nnode:http: ${JSON.stringify(node.slice(skip))}`).toBe(true);
      if (/^HTTP\/1\.1 200 [^]*?\r\n\r\n\["(GET|HEAD)"/.test(front)) reachedSandbox++;
    }
    // The generator reaches the heads the front answers itself (GET and HEAD the sandbox saw), not only refusals.
    expect(reachedSandbox, `seed ${plan.seed}`).toBeGreaterThan(0);
  });
});

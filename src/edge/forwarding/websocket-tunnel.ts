import { STATUS_CODES, type IncomingMessage } from 'node:http';
import { connect, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { connect as connectTls, type ConnectionOptions } from 'node:tls';
import { forwardRequestHeaders, forwardResponseHeaders, isSandgateSetCookie, type ForwardContext } from './forward-headers.js';
import { ChunkedEnd, MALFORMED, readAnswerHead, type AnswerHead } from './answer-framing.js';
import { FrameScanner } from './ws-frames.js';

/**
 * WebSocket (and any HTTP/1.1 Upgrade) passthrough: the proxy replays the handshake request upstream
 * with its own header rules and, once the upstream accepts (101), splices the two connections. The 101
 * answer and every frame after it pass through untouched, so subprotocols and extensions work as
 * negotiated; an upgrade the upstream declines ends with its answer (spliceUpgrade). The
 * upstream end is any byte pipe: a TCP connection to the sandbox, to a peer gateway's relay listener,
 * or a relay stream over a local supervisor session.
 */

/** A connection upstream: a net.Socket or a relay stream (both have an idle timeout). */
export type Pipe = Duplex & { setTimeout(ms: number, cb?: () => void): unknown };

/** Opens the upstream pipe; rejects with an error the caller maps to a denial. Aborted when the client leaves. */
export type Connect = (signal: AbortSignal) => Promise<Pipe>;

/** An upgrade must keep the headers that make it one (RFC 9110 §7.8, RFC 6455 §4.1). */
export const KEEP_ON_UPGRADE: ReadonlySet<string> = new Set(['connection', 'upgrade']);
const ORIGIN = 'origin';

/** Splits `host:port` / `[v6]:port` into what net.connect wants. */
export function hostAndPort(upstream: string): { host: string; port: number } {
  const colon = upstream.lastIndexOf(':');
  let host = upstream.slice(0, colon);
  if (host.startsWith('[')) host = host.slice(1, -1);
  return { host, port: Number(upstream.slice(colon + 1)) };
}

/**
 * A TCP connection with TCP_NODELAY — with `tls`, a TLS connection over it, resolved once the handshake
 * (and the peer's certificate check) passed; fails with `ETIMEDOUT` past `timeoutMs`.
 */
export function tcpConnect(upstream: string, timeoutMs: number, tls?: ConnectionOptions): Connect {
  return (signal) =>
    new Promise<Pipe>((resolve, reject) => {
      const { host, port } = hostAndPort(upstream);
      const sock: Socket = tls === undefined ? connect({ host, port, noDelay: true }) : connectTls({ ...tls, host, port }).setNoDelay(true);
      const timer = setTimeout(() => {
        sock.destroy();
        reject(Object.assign(new Error(`connecting to ${upstream} timed out`), { code: 'ETIMEDOUT' }));
      }, timeoutMs);
      const onAbort = (): void => {
        sock.destroy();
        reject(Object.assign(new Error('the client went away'), { code: 'ABORT_ERR' }));
      };
      signal.addEventListener('abort', onAbort, { once: true });
      sock.once('error', (err) => {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        reject(err);
      });
      sock.once(tls === undefined ? 'connect' : 'secureConnect', () => {
        clearTimeout(timer);
        signal.removeEventListener('abort', onAbort);
        resolve(sock);
      });
    });
}

/** The handshake headers sent upstream by the embedded proxy: its usual rules, keeping Connection/Upgrade. */
export function upgradeHeaders(req: IncomingMessage, drop: ReadonlySet<string>, ctx: ForwardContext, stripOrigin: boolean): string[] {
  const raw = stripOrigin ? withoutOrigin(req.rawHeaders) : req.rawHeaders;
  return forwardRequestHeaders(raw, drop, ctx, KEEP_ON_UPGRADE);
}

/**
 * Opens the upstream with `open`, writes the handshake (`method path HTTP/1.1` and `headers`), and reads
 * the upstream's answer before anything else of the client's reaches it. A 101 (the upgrade accepted):
 * the answer, then the bytes that arrived with the handshake, then both ways spliced. Any other answer
 * (the upgrade declined): it reaches the client as one response — hop-by-hop headers dropped,
 * `Connection: close` — and then both connections close, so no byte the client sends after the handshake
 * ever reaches the sandbox without a decision and the proxy's header rules. `fail` gets the error when the
 * upstream could not be opened (nothing was written to the client yet); later failures close both sides.
 * `activity`, when given, is called for bytes that carry data either way once spliced: on a WebSocket
 * only data frames count (ws-frames.ts), so pings and pongs alone keep nothing awake.
 */
export function spliceUpgrade(
  req: IncomingMessage,
  client: Socket,
  head: Buffer,
  path: string,
  headers: readonly string[],
  open: Connect,
  idleTimeoutMs: number,
  fail: (err: unknown) => void,
  activity?: () => void,
  /** Told the upstream's answer status (the exchange record's, when one is kept). */
  seen?: (status: number) => void,
): void {
  openWhileOpen(client, open, fail, (up) => {
    client.setNoDelay(true);
    let text = `${req.method} ${path} HTTP/1.1\r\n`;
    for (let i = 0; i < headers.length; i += 2) text += `${headers[i]}: ${headers[i + 1]}\r\n`;
    up.write(text + '\r\n');
    up.setTimeout(idleTimeoutMs, () => {
      up.destroy();
      client.destroy();
    });
    let broken = false;
    // Until the upstream's answer head is read, nothing has reached the client: a failure (a reset, a
    // peer's TLS alert, a close, bytes that are no answer) is answered with its typed denial.
    let answered = false;
    const failEarly = (err: Error): void => {
      answered = true;
      if (!client.destroyed) fail(err);
    };
    up.on('error', (err) => {
      if (!answered) return failEarly(err);
      broken = true;
      client.destroy();
    });
    // A relay stream ends (half-closed) before it closes: no answer will follow.
    up.once('end', () => {
      if (!answered) failEarly(new Error('the upstream ended before answering the upgrade'));
    });
    // A clean end lets the last bytes reach the client before its socket closes; a failure cuts it.
    up.once('close', () => {
      if (!answered) return failEarly(new Error('the upstream closed before answering the upgrade'));
      if (broken) client.destroy();
      else client.destroySoon();
    });
    client.once('close', () => up.destroy());
    readAnswerHead(up, (answer, rest) => {
      if (answer === undefined) return void up.destroy(new Error('the upstream answered the upgrade with no HTTP/1.1 head'));
      answered = true;
      seen?.(answer.status);
      if (answer.status === 101) {
        client.write(Buffer.concat([acceptedHead(answer), rest]));
        if (head.length > 0) up.write(head);
        if (activity !== undefined) watchData((req.headers.upgrade ?? '').toLowerCase() === 'websocket', client, up, head, rest, activity);
        up.pipe(client);
        client.pipe(up);
        return;
      }
      passDeclined(req.method === 'HEAD', answer, rest, up, client);
    });
  });
}

/**
 * Opens the upstream for a client `side` (a socket or an HTTP/2 stream) and hands it to `use` — unless the
 * client went away meanwhile: its close aborts the connect, and an upstream that opened anyway is closed.
 * `fail` gets the error of a connect that failed while the client was still there.
 */
export function openWhileOpen(side: { readonly destroyed: boolean; once(event: 'close', fn: () => void): unknown; off(event: 'close', fn: () => void): unknown }, open: Connect, fail: (err: unknown) => void, use: (up: Pipe) => void): void {
  const ac = new AbortController();
  const gone = (): void => ac.abort();
  side.once('close', gone);
  open(ac.signal).then(
    (up) => {
      side.off('close', gone);
      if (side.destroyed) return void up.destroy();
      use(up);
    },
    (err: unknown) => {
      side.off('close', gone);
      if (!side.destroyed) fail(err);
    },
  );
}

/**
 * Calls `activity` for data on either side of a spliced tunnel, the bytes already passed on each side
 * (`clientFirst`, `upFirst`) included: on a WebSocket (`ws`) data frames only, on any other protocol
 * every byte.
 */
export function watchData(ws: boolean, client: Duplex, up: Duplex, clientFirst: Buffer, upFirst: Buffer, activity: () => void): void {
  const side = (first: Buffer): ((chunk: Buffer) => void) => {
    const scanner = ws ? new FrameScanner() : undefined;
    if (first.length > 0 && (scanner === undefined || scanner.feed(first))) activity();
    return (chunk) => {
      if (scanner === undefined || scanner.feed(chunk)) activity();
    };
  };
  client.on('data', side(clientFirst));
  up.on('data', side(upFirst));
}

/**
 * An accepted upgrade's head, to the client: its bytes as they came, but for a `Set-Cookie` line of
 * sandgate's cookie (forward-headers.ts isSandgateSetCookie, the rule of every carrier), which is left out.
 */
function acceptedHead(answer: AnswerHead): Buffer {
  const raw = answer.raw;
  let drop: Set<number> | undefined;
  for (let i = 0; i < raw.length; i += 2) if (isSandgateSetCookie(raw[i]!.toLowerCase(), raw[i + 1]!)) (drop ??= new Set()).add(i / 2 + 1);
  if (drop === undefined) return answer.bytes;
  const lines = answer.bytes.toString('latin1').split('\r\n');
  return Buffer.from(lines.filter((_line, n) => !drop.has(n)).join('\r\n'), 'latin1');
}

/**
 * A declined upgrade's answer, to the client: its head (hop-by-hop headers dropped, `Connection: close`),
 * then its body as its framing bounds it — a length, chunks, or the upstream's close — then both closed.
 */
function passDeclined(headRequest: boolean, answer: AnswerHead, rest: Buffer, up: Pipe, client: Socket): void {
  const headers = forwardResponseHeaders(answer.raw);
  let length: number | undefined;
  let chunked = false;
  for (let i = 0; i < answer.raw.length; i += 2) {
    const name = answer.raw[i]!.toLowerCase();
    if (name === 'content-length') length = Number(answer.raw[i + 1]);
    else if (name === 'transfer-encoding') chunked = /(?:^|,)\s*chunked\s*$/i.test(answer.raw[i + 1]!);
  }
  // A length that is no length: nothing of the answer goes out, both connections are cut.
  if (!chunked && length !== undefined && !(length >= 0)) {
    up.destroy();
    return void client.destroy();
  }
  let out = `HTTP/1.1 ${answer.status} ${STATUS_CODES[answer.status] ?? 'unknown'}\r\n`;
  for (let i = 0; i < headers.length; i += 2) out += `${headers[i]}: ${headers[i + 1]}\r\n`;
  if (chunked) out += 'Transfer-Encoding: chunked\r\n';
  client.write(out + 'Connection: close\r\n\r\n', 'latin1');
  const finish = (): void => {
    up.destroy();
    client.end();
  };
  const bodyless = headRequest || answer.status === 204 || answer.status === 304 || answer.status < 200;
  if (bodyless || (!chunked && length === 0)) return finish();
  const chunks = chunked ? new ChunkedEnd() : undefined;
  let left = length ?? Infinity;
  const forward = (data: Buffer): void => {
    const end = chunks !== undefined ? chunks.feed(data) : data.length >= left ? left : undefined;
    if (end === MALFORMED) {
      up.destroy();
      return void client.destroy();
    }
    if (end === undefined) {
      if (chunks === undefined) left -= data.length;
      client.write(data);
      return;
    }
    up.off('data', forward);
    client.write(data.subarray(0, end));
    finish();
  };
  up.on('data', forward);
  if (rest.length > 0) forward(rest);
  up.resume();
}

export function withoutOrigin(raw: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.toLowerCase() !== ORIGIN) out.push(raw[i]!, raw[i + 1]!);
  return out;
}

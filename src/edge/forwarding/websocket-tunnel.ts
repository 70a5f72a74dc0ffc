import type { IncomingMessage } from 'node:http';
import { connect, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { forwardRequestHeaders, type ForwardContext } from './forward-headers.js';

/**
 * WebSocket (and any HTTP/1.1 Upgrade) passthrough: the proxy replays the handshake request upstream
 * with its own header rules, then splices the two connections. The upstream's 101 answer and every
 * frame after it pass through untouched, so subprotocols and extensions work as negotiated. The
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

/** A TCP connection with TCP_NODELAY; fails with `ETIMEDOUT` past `timeoutMs`. */
export function tcpConnect(upstream: string, timeoutMs: number): Connect {
  return (signal) =>
    new Promise<Pipe>((resolve, reject) => {
      const { host, port } = hostAndPort(upstream);
      const sock: Socket = connect({ host, port, noDelay: true });
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
      sock.once('connect', () => {
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
 * Opens the upstream with `open`, writes the handshake (`method path HTTP/1.1` and `headers`) and the
 * bytes that arrived with it, then splices both ways. `fail` gets the error when the upstream could not
 * be opened (nothing was written to the client yet); later failures close both sides.
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
): void {
  const ac = new AbortController();
  const gone = (): void => ac.abort();
  client.once('close', gone);
  open(ac.signal).then(
    (up) => {
      client.off('close', gone);
      if (client.destroyed) return void up.destroy();
      client.setNoDelay(true);
      let text = `${req.method} ${path} HTTP/1.1\r\n`;
      for (let i = 0; i < headers.length; i += 2) text += `${headers[i]}: ${headers[i + 1]}\r\n`;
      up.write(text + '\r\n');
      if (head.length > 0) up.write(head);
      up.setTimeout(idleTimeoutMs, () => {
        up.destroy();
        client.destroy();
      });
      let broken = false;
      up.on('error', () => {
        broken = true;
        client.destroy();
      });
      up.pipe(client);
      client.pipe(up);
      // A clean end lets the last bytes reach the client before its socket closes; a failure cuts it.
      up.once('close', () => (broken ? client.destroy() : client.destroySoon()));
      client.once('close', () => up.destroy());
    },
    (err: unknown) => {
      client.off('close', gone);
      if (!client.destroyed) fail(err);
    },
  );
}

function withoutOrigin(raw: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.toLowerCase() !== ORIGIN) out.push(raw[i]!, raw[i + 1]!);
  return out;
}

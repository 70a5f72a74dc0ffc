import type { IncomingMessage } from 'node:http';
import { connect, type Socket } from 'node:net';
import type { Allow } from '../../domain/decide.js';
import type { ErrorCode } from '../../domain/errors.js';
import { forwardRequestHeaders, type ForwardContext } from './forward-headers.js';

/**
 * WebSocket (and any HTTP/1.1 Upgrade) passthrough: the proxy replays the handshake request to the
 * sandbox with its own header rules, then splices the two TCP connections. The sandbox's 101 answer and
 * every frame after it pass through untouched, so subprotocols and extensions work as negotiated.
 */

export interface TunnelOptions {
  readonly drop: ReadonlySet<string>;
  /** Browser IDEs in sandboxes reject an Origin that is not their own: drop it on upgrade when asked. */
  readonly stripOrigin: boolean;
  readonly connectTimeoutMs: number;
  readonly idleTimeoutMs: number;
}

/** An upgrade must keep the headers that make it one (RFC 9110 §7.8, RFC 6455 §4.1). */
const KEEP_ON_UPGRADE: ReadonlySet<string> = new Set(['connection', 'upgrade']);
const ORIGIN: ReadonlySet<string> = new Set(['origin']);

/** Splits `host:port` / `[v6]:port` into what net.connect wants. */
export function hostAndPort(upstream: string): { host: string; port: number } {
  const colon = upstream.lastIndexOf(':');
  let host = upstream.slice(0, colon);
  if (host.startsWith('[')) host = host.slice(1, -1);
  return { host, port: Number(upstream.slice(colon + 1)) };
}

export function tunnelUpgrade(
  req: IncomingMessage,
  client: Socket,
  head: Buffer,
  d: Allow,
  ctx: ForwardContext,
  opts: TunnelOptions,
  fail: (code: ErrorCode) => void,
): void {
  const { host, port } = hostAndPort(d.upstream);
  const upstream = connect({ host, port, noDelay: true });
  let connected = false;
  const timer = setTimeout(() => {
    upstream.destroy();
    fail('upstream_timeout');
  }, opts.connectTimeoutMs);
  upstream.once('error', (err: NodeJS.ErrnoException) => {
    clearTimeout(timer);
    if (!connected) return fail(err.code === 'ECONNREFUSED' ? 'port_not_open' : 'upstream_error');
    client.destroy();
  });
  client.once('close', () => upstream.destroy());
  upstream.once('connect', () => {
    connected = true;
    clearTimeout(timer);
    client.setNoDelay(true);
    const raw = opts.stripOrigin ? stripOrigin(req.rawHeaders) : req.rawHeaders;
    const headers = forwardRequestHeaders(raw, opts.drop, ctx, KEEP_ON_UPGRADE);
    let text = `${req.method} ${d.target.path ?? req.url ?? '/'} HTTP/1.1\r\n`;
    for (let i = 0; i < headers.length; i += 2) text += `${headers[i]}: ${headers[i + 1]}\r\n`;
    upstream.write(text + '\r\n');
    if (head.length > 0) upstream.write(head);
    upstream.setTimeout(opts.idleTimeoutMs, () => {
      upstream.destroy();
      client.destroy();
    });
    upstream.pipe(client);
    client.pipe(upstream);
    upstream.once('close', () => client.destroy());
  });
}

function stripOrigin(raw: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2) if (!ORIGIN.has(raw[i]!.toLowerCase())) out.push(raw[i]!, raw[i + 1]!);
  return out;
}

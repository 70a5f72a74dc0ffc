import { request, type IncomingMessage, type Server } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { deny, type Deny } from '../../domain/decide.js';
import { ERROR_CODES, type ErrorCode } from '../../domain/errors.js';
import type { Logger } from '../../observability/logger.js';
import type { RelayOpener } from '../../sessions/relay-opener.js';
import { ERROR_HEADER, writeDenial } from '../denial.js';
import { relayDenial } from './relay-exchange.js';
import type { RelayTarget } from './relay-headers.js';

/**
 * A byte tunnel to a sandbox port over the relay session of another gateway: how a gateway carries HTTP/2
 * (an h2c port) to a relay-only sandbox whose supervisor session a peer holds. The gateway sends
 * `CONNECT` to the peer's relay listener with the same target-bound credential and target headers as a
 * relayed request (relay-headers.ts); the listener checks them exactly as for a request, opens a relay
 * stream to the target and answers `200`, and from then on the connection carries the stream's bytes both
 * ways — the gateway runs its HTTP/2 session to the sandbox over it. Refusals are the listener's usual
 * typed answers (401 relay_unauthorized, 502 sandbox_unreachable, 503 relay_busy, …), as a response to
 * the CONNECT.
 */

/** What the relay listener's CONNECT handler needs of the listener. */
export interface TunnelListener {
  /** Authenticates and reads the target, or says why not. */
  admit(req: IncomingMessage): RelayTarget | Deny;
  readonly streams: RelayOpener;
  readonly log: Logger;
}

/** Serves CONNECT on the relay listener's server (in place of the refusal every other listener gives). */
export function acceptTunnels(server: Server, l: TunnelListener): void {
  server.removeAllListeners('connect');
  server.on('connect', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    socket.on('error', () => socket.destroy());
    const route = { headers: req.headers as Record<string, string | undefined>, host: req.headers.host, path: req.url };
    const t = l.admit(req);
    if ('allow' in t) return void writeDenial(socket, t, route);
    const ac = new AbortController();
    socket.once('close', () => ac.abort());
    l.streams.openRelayStream(t.namespace, t.name, t.port, ac.signal).then(
      (stream) => {
        if (socket.destroyed) return void stream.destroy();
        socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
        if (head.length > 0) stream.write(head);
        splice(socket, stream);
      },
      (err: unknown) => {
        l.log.debug({ err, target: t }, 'relay tunnel failed to open');
        writeDenial(socket, relayDenial(err), route);
      },
    );
  });
}

/** Both ways until either side ends; an error or a close on one side closes the other. */
function splice(a: Duplex, b: Duplex): void {
  a.pipe(b);
  b.pipe(a);
  const cut = (): void => {
    a.destroy();
    b.destroy();
  };
  a.once('close', cut);
  b.once('close', cut);
  a.on('error', cut);
  b.on('error', cut);
}

/** A peer's refusal of a tunnel, with the typed code its answer named. */
export class TunnelRefused extends Error {
  constructor(
    readonly denial: Deny,
    readonly status: number,
  ) {
    super(`the peer gateway refused the relay tunnel: ${status} ${denial.code}`);
  }
}

function isErrorCode(v: unknown): v is ErrorCode {
  return typeof v === 'string' && Object.hasOwn(ERROR_CODES, v);
}

/**
 * Opens a tunnel through the relay listener at `upstream` (`host:port`), over the connection `open`
 * makes (plain or TLS, relay-peer.ts), with the relay `headers` (credential and target); resolves with the
 * connection once the peer answered 200. A refusal rejects with TunnelRefused (its typed code), a network
 * failure with the connection's error.
 */
export function openPeerTunnel(open: () => Promise<Duplex>, upstream: string, headers: readonly (readonly [string, string])[], timeoutMs: number): Promise<Duplex> {
  return new Promise<Duplex>((resolve, reject) => {
    const req = request({
      method: 'CONNECT',
      path: upstream,
      headers: { host: upstream, ...Object.fromEntries(headers) },
      createConnection: ((_opts: unknown, created: (err: Error | null, sock?: Socket) => void) => {
        open().then(
          (sock) => created(null, sock as Socket),
          (err: Error) => created(err),
        );
        return undefined;
      }) as never,
    });
    const timer = setTimeout(() => req.destroy(Object.assign(new Error(`the relay tunnel to ${upstream} did not open in time`), { code: 'ETIMEDOUT' })), timeoutMs);
    timer.unref();
    req.once('connect', (res: IncomingMessage, socket: Duplex, head: Buffer) => {
      clearTimeout(timer);
      if (res.statusCode === 200) {
        if (head.length > 0) socket.unshift(head);
        return resolve(socket);
      }
      socket.destroy();
      const code = res.headers[ERROR_HEADER];
      reject(new TunnelRefused(deny(isErrorCode(code) ? code : 'upstream_error'), res.statusCode ?? 0));
    });
    req.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    req.end();
  });
}

import type { Server as NetServer, Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';

/**
 * What every listener bounds before a connection has asked for anything: the connections it holds at
 * once, the TLS handshake, and the time from accept to the first request. One guard per listener,
 * installed on its server before it listens (installGuard); the layers that read requests — node:http,
 * the fronts (edge/http-front.ts), HTTP/2 beside HTTP/1.1 (tls/http2-beside.ts), the gRPC server — say
 * when a connection's first request head is complete (firstRequest). From then on the connection is
 * governed by the keep-alive and idle timeouts of whatever reads it.
 *
 * - Past `maxConnections` open connections, each new one is destroyed at accept, before any byte is read.
 *   (Not net.Server's own `maxConnections`: in a node:cluster worker a connection it turns away goes back
 *   to the primary, which hands it to a worker again, over and over while every worker is full.)
 * - A TLS connection whose handshake has not finished within `tlsHandshakeTimeoutMs`, or that failed its
 *   handshake, is destroyed, never answered: bytes written before the handshake completes are held by
 *   the TLS layer and never sent, so an HTTP answer would keep the socket open.
 * - A connection whose first request head (or, over HTTP/2, its preface and first HEADERS) is not
 *   complete `requestHeaderTimeoutMs` after accept is destroyed: a client that sends nothing, or trickles
 *   a head a byte at a time, holds a socket no longer than that.
 */

/** The listeners guarded, as metric label values: a fixed set, never derived from a client. */
export const GUARDED_LISTENERS = ['proxy', 'proxy_tls', 'relay', 'supervisor', 'admin', 'ops', 'grpc'] as const;
export type GuardedListener = (typeof GUARDED_LISTENERS)[number];

export interface ConnectionLimits {
  /** Connections one listener holds open at once; further ones are closed at accept. */
  readonly maxConnections: number;
  /** From accept to a finished TLS handshake. */
  readonly tlsHandshakeTimeoutMs: number;
  /** From accept to a complete first request head (HTTP/2: the preface and first HEADERS). */
  readonly requestHeaderTimeoutMs: number;
}

export const CONNECTION_LIMITS: ConnectionLimits = Object.freeze({ maxConnections: 10_000, tlsHandshakeTimeoutMs: 10_000, requestHeaderTimeoutMs: 10_000 });

/** A connection that has not yet sent its first request head. */
interface Waiting {
  readonly raw: Socket;
  readonly acceptedAt: number;
  timer: NodeJS.Timeout | undefined;
}

/** Connections still before their first request, by every socket object the layers above may hold for them (the TCP socket, its TLS socket). */
const waiting = new WeakMap<object, Waiting>();

/** `socket`'s first request head is complete: the request-header timeout no longer applies to it. */
export function firstRequest(socket: object | undefined): void {
  if (socket === undefined) return;
  const w = waiting.get(socket);
  if (w === undefined) return;
  clearTimer(w);
  waiting.delete(w.raw);
  waiting.delete(socket);
}

function clearTimer(w: Waiting): void {
  if (w.timer !== undefined) clearTimeout(w.timer);
  w.timer = undefined;
}

function destroyRaw(w: Waiting): void {
  w.timer = undefined;
  w.raw.destroy();
}

/** A TCP connection as the TLS socket over it reports it: a key the two share while both are open. */
function endpoints(s: Socket): string | undefined {
  if (s.remoteAddress === undefined || s.remotePort === undefined) return undefined;
  return `${s.remoteAddress}|${s.remotePort}|${s.localAddress ?? ''}|${s.localPort ?? ''}`;
}

export class ConnectionGuard {
  /** Connections open now. */
  open = 0;
  /** Connections closed at accept because `open` was at the cap. */
  refused = 0;
  /** TLS connections in their handshake, by endpoints: 'secureConnection' gives the TLS socket, not the TCP one. */
  private readonly handshaking = new Map<string, Waiting>();

  constructor(
    readonly listener: GuardedListener,
    readonly limits: ConnectionLimits = CONNECTION_LIMITS,
  ) {}

  /**
   * Installs the guard on `server` (http, https, http2 or their secure variants), after every other
   * listener of its events is registered: the connection and request events get listeners of their own,
   * ahead of the server's. `tls`: connections start with a TLS handshake. `http1`: node:http reads the
   * server's requests (an HTTP/2 server's reader calls firstRequest itself: a 'request' listener on it
   * would turn on node:http2's compatibility layer).
   */
  install(server: NetServer, { tls, http1 }: { readonly tls: boolean; readonly http1: boolean }): void {
    server.prependListener('connection', (socket: Socket) => this.accepted(socket, tls));
    if (tls) {
      server.prependListener('secureConnection', (socket: TLSSocket) => this.secured(socket));
      // A handshake that failed or timed out: nothing may be answered over it.
      server.prependListener('tlsClientError', (_err: Error, socket: TLSSocket) => socket.destroy());
    }
    if (!http1) return;
    // node:http's request events. 'upgrade' and 'connect' only where the server has handlers already:
    // a listener of these events changes how node:http treats such requests.
    server.on('request', (req: { socket: Socket }) => firstRequest(req.socket));
    for (const event of ['upgrade', 'connect']) {
      if (server.listenerCount(event) > 0) server.prependListener(event, (req: { socket: Socket }) => firstRequest(req.socket));
    }
  }

  private accepted(raw: Socket, tls: boolean): void {
    // The server's own connection listeners still see the socket, destroyed: theirs is the usual path of
    // a connection the client reset at once.
    if (this.open >= this.limits.maxConnections) {
      this.refused++;
      raw.destroy();
      return;
    }
    this.open++;
    const w: Waiting = { raw, acceptedAt: Date.now(), timer: undefined };
    waiting.set(raw, w);
    const key = tls ? endpoints(raw) : undefined;
    if (key !== undefined) this.handshaking.set(key, w);
    const first = tls ? Math.min(this.limits.tlsHandshakeTimeoutMs, this.limits.requestHeaderTimeoutMs) : this.limits.requestHeaderTimeoutMs;
    w.timer = setTimeout(destroyRaw, first, w);
    w.timer.unref();
    raw.once('close', () => {
      this.open--;
      clearTimer(w);
      if (key !== undefined) this.handshaking.delete(key);
    });
  }

  /** The handshake finished: what is left of the request-header timeout applies to the TLS socket. */
  private secured(socket: TLSSocket): void {
    const key = endpoints(socket);
    const w = key === undefined ? undefined : this.handshaking.get(key);
    if (w === undefined) return void socket.destroy();
    this.handshaking.delete(key!);
    waiting.set(socket, w);
    clearTimer(w);
    const left = w.acceptedAt + this.limits.requestHeaderTimeoutMs - Date.now();
    if (left <= 0) return void socket.destroy();
    w.timer = setTimeout(destroyRaw, left, w);
    w.timer.unref();
  }
}

/** The guards of one gateway's listeners, one per listener, all with the same limits; the metrics read them. */
export class ListenerGuards {
  private readonly guards = new Map<GuardedListener, ConnectionGuard>();

  constructor(readonly limits: ConnectionLimits = CONNECTION_LIMITS) {}

  for(listener: GuardedListener): ConnectionGuard {
    let g = this.guards.get(listener);
    if (g === undefined) this.guards.set(listener, (g = new ConnectionGuard(listener, this.limits)));
    return g;
  }

  /** The guards made so far, in GUARDED_LISTENERS order. */
  list(): ConnectionGuard[] {
    return GUARDED_LISTENERS.flatMap((l) => this.guards.get(l) ?? []);
  }
}

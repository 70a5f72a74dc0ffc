import { EventEmitter } from 'node:events';
import { connect, type Socket } from 'node:net';
import WebSocket from 'ws';
import { HEADER_BYTES, OPEN_FAIL } from './relay-frames.js';
import { binaryOf, DEFAULT_CHUNK_BYTES, DEFAULT_HIGH_WATER_BYTES, DEFAULT_WINDOW_BYTES, RelayMux, wsTransport } from './relay-mux.js';
import type { RelayStream } from './relay-stream.js';
import { CLOSE, DO_NOT_RETRY, negotiated, PROTOCOL_VERSION, RECONNECT_AT_ONCE, SUBPROTOCOL, SUPERVISOR_PATH, type Accepted, type Feature, type ServerMessage } from './supervisor-protocol.js';
import { backoffDelay } from '../lib/backoff.js';

/**
 * The reference supervisor client: what runs inside a sandbox. It connects, says hello, heartbeats both
 * ways (closing a silent connection after 3 intervals), and reconnects with jittered exponential backoff.
 * It follows the gateway's close codes: 1012 (service restart) and 4409 (presence lost) reconnect at once
 * (to the next gateway when given several),
 * 4000 (superseded by a newer session) stops for good, 4401/4403 stop unless the token is refreshable.
 *
 * Relay: a stream the gateway opens is connected to `127.0.0.1:<port>` — the OPEN frame carries a port
 * and nothing else, so the gateway can never make the supervisor dial another host — with TCP_NODELAY
 * (Nagle plus delayed ACKs cost the reference relay ~44 ms per small request), and spliced to the stream.
 *
 * Token refresh: a session ends at its token's expiry (4440) unless refreshed. When the token is a
 * function (a token file re-read, a callback), the client asks it for a fresh token ahead of expiry —
 * when a fifth of the remaining lifetime, and at least 3 heartbeat intervals, is left — and sends it in a
 * `refresh` frame; while the source still returns the current token it asks again every interval. A
 * static token is never refreshed: its session ends at `exp` and the client stops.
 *
 * Events: `accepted` ({sessionId, epoch, expiresAt}), `refreshed` ({expiresAt}), `disconnected`
 * ({code, reason}), `stopped` ({code, reason}).
 */

export interface SupervisorClientOptions {
  /**
   * `ws://host:port` (the path /v1/supervisor is added when absent), or several: each reconnect tries the
   * next one, so a supervisor told "service restart" lands on another gateway at once.
   */
  readonly gateway: string | readonly string[];
  /** The sandbox-bound token, or a function returning a fresh one for each connection and each refresh. */
  readonly token: string | (() => string | Promise<string>);
  readonly namespace: string;
  readonly name: string;
  readonly instanceId: string;
  readonly version?: string;
  readonly backoff?: { readonly initialMs: number; readonly maxMs: number };
  /** Defaults to Math.random; tests pass a fixed source. */
  readonly random?: () => number;
  /** Relay streams to this sandbox's loopback; `false` refuses every stream. */
  readonly relay?: RelayClientOptions | false;
  /** Epoch ms, for scheduling token refreshes; defaults to Date.now (tests pass a fake clock). */
  readonly now?: () => number;
  /**
   * PEM CA certificate(s) a `wss://` gateway's certificate must chain to (a private CA); default the
   * system's trusted CAs. A gateway whose certificate does not verify is never sent the token.
   */
  readonly ca?: string | Buffer;
}

export interface RelayClientOptions {
  /**
   * The loopback address relayed streams are dialled on (default 127.0.0.1). Only a loopback address is
   * accepted: a supervisor reaches its own sandbox, never another host. Lets one machine run several
   * sandboxes' daemons on the same port (envd's 49983) on distinct 127.0.0.0/8 addresses.
   */
  readonly host?: string;
  /** Ports the gateway may reach; default any. */
  readonly allowPorts?: readonly number[];
  /** Connecting to a port; past it the stream is refused with `timeout`. Default 10000. */
  readonly connectTimeoutMs?: number;
  /** Streams at once; more are refused with `busy`. Default 1024. */
  readonly maxStreams?: number;
  /** Receive window per stream. Default 256 KiB. */
  readonly windowBytes?: number;
}

/** The relay host: only ever this sandbox's own loopback. */
const RELAY_HOST = '127.0.0.1';
/** 127.0.0.0/8 or ::1, written as an address (never a name a resolver could point elsewhere). */
function isLoopback(host: string): boolean {
  if (host === '::1') return true;
  const m = /^127\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(host);
  return m !== null && m.slice(1).every((o) => Number(o) <= 255);
}

/** DATA size when the gateway does not say how large a frame it accepts. */
const FALLBACK_FRAME_BYTES = 16 * 1024;

export type SupervisorState = 'connecting' | 'connected' | 'waiting' | 'stopped';

export function supervisorUrl(gateway: string): string {
  const u = new URL(gateway);
  if (u.pathname === '/' || u.pathname === '') u.pathname = SUPERVISOR_PATH;
  return u.toString();
}

/** The `exp` of a JWT in epoch ms, read without verifying (the gateway verifies); undefined when absent. */
export function tokenExpiry(token: string): number | undefined {
  try {
    const exp = (JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString()) as { exp?: unknown }).exp;
    return typeof exp === 'number' && Number.isFinite(exp) ? exp * 1000 : undefined;
  } catch {
    return undefined;
  }
}

/** Longest delay setTimeout keeps (2^31 − 1 ms); a later refresh is re-checked when it fires. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Milliseconds until a session token expiring at `expiresAt` should be refreshed: when a fifth of the
 * remaining lifetime, and at least 3 heartbeat intervals, is left (the gateway closes at its last
 * heartbeat round before `exp`). 0 means now.
 */
export function refreshDelay(expiresAt: number, now: number, heartbeatIntervalMs: number): number {
  const remaining = expiresAt - now;
  return Math.max(0, remaining - Math.max(3 * heartbeatIntervalMs, remaining / 5));
}

export class SupervisorClient extends EventEmitter {
  state: SupervisorState = 'waiting';
  sessionId: string | undefined;
  epoch = 0;
  private ws: WebSocket | undefined;
  private attempt = 0;
  private timer: NodeJS.Timeout | undefined;
  private heartbeat: NodeJS.Timeout | undefined;
  private refreshTimer: NodeJS.Timeout | undefined;
  private lastSeen = 0;
  /** The token the current session stands on, when it expires, and the session's heartbeat interval. */
  private token = '';
  private intervalMs = 0;
  /** A refresh frame is out and not yet answered: the gateway refuses a second one meanwhile (4415). */
  private refreshPending = false;
  /** Epoch ms the current session ends unless refreshed (0 between sessions). */
  expiresAt = 0;
  private readonly now: () => number;
  private readonly urls: readonly string[];
  private next = 0;
  private readonly random: () => number;
  private readonly backoff: { readonly initialMs: number; readonly maxMs: number };
  private readonly allowPorts: ReadonlySet<number> | undefined;
  private readonly relayHost: string;
  /** The current session's relay streams (undefined between sessions). */
  relay: RelayMux | undefined;
  /** The features the current session uses (both sides announced them). */
  features: readonly Feature[] = [];
  /** What this supervisor announces in hello. */
  private readonly offered: Feature[];
  /** The new session of a move, until it is accepted. */
  private moving: WebSocket | undefined;
  private movingToken = '';
  /** The session a move replaced, until its gateway closes it; its relay streams run on meanwhile. */
  private leaving: { readonly ws: WebSocket; readonly relay: RelayMux | undefined; readonly timer: NodeJS.Timeout } | undefined;

  constructor(private readonly opts: SupervisorClientOptions) {
    super();
    this.urls = (typeof opts.gateway === 'string' ? [opts.gateway] : opts.gateway).map(supervisorUrl);
    if (this.urls.length === 0) throw new Error('SupervisorClient needs at least one gateway');
    this.random = opts.random ?? Math.random;
    this.now = opts.now ?? Date.now;
    this.backoff = opts.backoff ?? { initialMs: 100, maxMs: 10_000 };
    this.allowPorts = opts.relay === false || opts.relay?.allowPorts === undefined ? undefined : new Set(opts.relay.allowPorts);
    const host = opts.relay === false ? undefined : opts.relay?.host;
    if (host !== undefined && !isLoopback(host)) throw new TypeError(`relay host ${JSON.stringify(host)} is not a loopback address`);
    this.relayHost = host ?? RELAY_HOST;
    this.offered = opts.relay === false ? ['move'] : ['relay', 'move'];
  }

  start(): this {
    if (this.state === 'waiting') void this.connect();
    return this;
  }

  /** Closes the session (1000) and stops reconnecting. */
  stop(): void {
    this.finish(CLOSE.normal, 'stopped');
  }

  private async connect(): Promise<void> {
    if (this.state === 'stopped') return;
    this.state = 'connecting';
    const token = await this.freshToken();
    if (token === undefined) return this.retry(false);
    if ((this.state as SupervisorState) === 'stopped') return;
    this.token = token;
    this.ws = this.openSocket(this.urls[this.next++ % this.urls.length]!, token);
  }

  private async freshToken(): Promise<string | undefined> {
    try {
      return typeof this.opts.token === 'function' ? await this.opts.token() : this.opts.token;
    } catch (err) {
      this.report(err);
      return undefined;
    }
  }

  /** Opens a socket and says hello; its frames count as the session's once it is `this.ws`. */
  private openSocket(url: string, token: string): WebSocket {
    const ws = new WebSocket(url, SUBPROTOCOL, { headers: { authorization: `Bearer ${token}` }, handshakeTimeout: 10_000, ca: this.opts.ca });
    ws.on('open', () => {
      if (ws === this.ws) this.lastSeen = Date.now();
      ws.send(
        JSON.stringify({
          type: 'hello',
          namespace: this.opts.namespace,
          name: this.opts.name,
          instanceId: this.opts.instanceId,
          version: this.opts.version ?? 'sandgate-supervisor/2',
          protocol: PROTOCOL_VERSION,
          features: this.offered,
        }),
      );
    });
    ws.on('message', (data, isBinary) => this.message(ws, data, isBinary));
    // The gateway authenticates before the upgrade: a token it refuses is answered 401 on the HTTP
    // request, read here as the session's 4401 would be (docs/supervisor-protocol.md).
    ws.on('unexpected-response', (req, res) => {
      const status = res.statusCode ?? 0;
      res.resume();
      req.destroy();
      ws.terminate();
      if (status === 401) this.closed(ws, CLOSE.unauthorized, 'the gateway refused the token (401)');
      else this.closed(ws, 1006, `the gateway answered the upgrade with ${status}`);
    });
    // Connection errors surface as a close; without this listener ws would throw.
    ws.on('error', () => {});
    ws.on('close', (code, reason) => this.closed(ws, code, reason.toString()));
    return ws;
  }

  private message(ws: WebSocket, data: WebSocket.RawData, isBinary: boolean): void {
    const leaving = this.leaving?.ws === ws ? this.leaving : undefined;
    if (ws === this.ws) this.lastSeen = Date.now();
    else if (ws !== this.moving && leaving === undefined) return;
    if (isBinary) {
      const relay = leaving !== undefined ? leaving.relay : ws === this.ws ? this.relay : undefined;
      if (relay === undefined) return;
      const bad = relay.receive(binaryOf(data));
      if (bad !== undefined) ws.close(bad.close, bad.message.slice(0, 123));
      return;
    }
    let m: ServerMessage;
    try {
      m = JSON.parse(data.toString()) as ServerMessage;
    } catch {
      return;
    }
    if (m.type === 'ping') ws.send(JSON.stringify({ type: 'pong', t: m.t }));
    else if (m.type === 'accepted') {
      if (ws === this.moving) this.moved(ws);
      if (ws === this.ws) this.accepted(ws, m);
    } else if (ws !== this.ws) return;
    else if (m.type === 'refreshed' && typeof m.expiresAt === 'number') {
      this.expiresAt = m.expiresAt;
      this.refreshPending = false;
      this.scheduleRefresh();
      this.emit('refreshed', { expiresAt: m.expiresAt });
    } else if (m.type === 'move' && this.features.includes('move')) void this.move(typeof m.gateway === 'string' ? m.gateway : undefined);
  }

  /**
   * The gateway asked this session to move: a new session is opened (to `gateway`, else to the next
   * gateway in the list) while this one goes on. Once the new one is accepted it becomes the session; the
   * old gateway closes the old socket when it sees the newer claim (the epoch fence), so the sandbox has a
   * session throughout. If the new one fails, the old one simply stays.
   */
  private async move(gateway: string | undefined): Promise<void> {
    if (this.state !== 'connected' || this.moving !== undefined || this.leaving !== undefined) return;
    const url = gateway !== undefined ? supervisorUrl(gateway) : this.urls[this.next++ % this.urls.length]!;
    const token = await this.freshToken();
    if (token === undefined || this.state !== 'connected' || this.moving !== undefined) return;
    this.emit('moving', { gateway: url });
    this.moving = this.openSocket(url, token);
    this.movingToken = token;
  }

  /** The new session of a move is accepted: it becomes the session, the old one lingers until closed. */
  private moved(ws: WebSocket): void {
    const old = this.ws;
    this.moving = undefined;
    if (old !== undefined) {
      // The old gateway closes it once it sees the new claim. Closing it from here first would have that
      // gateway release the session before its mirror shows the new record (the sandbox would leave Ready
      // there for a moment), so only a gateway that never closes it is left, after 10 intervals.
      const timer = setTimeout(() => old.close(CLOSE.normal, 'moved'), 10 * Math.max(this.intervalMs, 1));
      timer.unref();
      this.leaving = { ws: old, relay: this.relay, timer };
    }
    this.relay = undefined;
    this.ws = ws;
    this.token = this.movingToken;
    this.lastSeen = Date.now();
  }

  private accepted(ws: WebSocket, m: Accepted): void {
    const { sessionId, epoch, heartbeatIntervalMs: intervalMs, maxFrameBytes, expiresAt } = m;
    this.state = 'connected';
    this.features = negotiated(this.offered, Array.isArray(m.features) ? m.features : undefined);
    this.intervalMs = intervalMs;
    this.expiresAt = typeof expiresAt === 'number' ? expiresAt : (tokenExpiry(this.token) ?? 0);
    this.scheduleRefresh();
    this.relay?.close();
    const frame = typeof maxFrameBytes === 'number' && maxFrameBytes > HEADER_BYTES ? maxFrameBytes : FALLBACK_FRAME_BYTES;
    const relay = this.opts.relay === false ? undefined : this.opts.relay;
    this.relay = new RelayMux({
      role: 'supervisor',
      transport: wsTransport(ws),
      windowBytes: relay?.windowBytes ?? DEFAULT_WINDOW_BYTES,
      maxChunkBytes: Math.min(DEFAULT_CHUNK_BYTES, frame - HEADER_BYTES),
      highWaterBytes: DEFAULT_HIGH_WATER_BYTES,
      onOpen: this.opts.relay === false ? undefined : (s) => this.dial(s),
    });
    this.sessionId = sessionId;
    this.epoch = epoch;
    this.attempt = 0;
    clearInterval(this.heartbeat);
    this.heartbeat = setInterval(() => {
      if (Date.now() - this.lastSeen >= 3 * intervalMs) {
        // The gateway went silent: do not wait for TCP to notice.
        ws.terminate();
        return;
      }
      if (ws.readyState === ws.OPEN) ws.send(JSON.stringify({ type: 'ping', t: Date.now() }));
    }, intervalMs);
    this.heartbeat.unref();
    this.emit('accepted', { sessionId, epoch, expiresAt: this.expiresAt, features: this.features });
  }

  /**
   * Asks the token source for a fresh token and, when it differs from the session's, sends it in a
   * `refresh` frame (the gateway answers `refreshed`, or closes with 4401/4403). Resolves true when a
   * frame was sent. Called ahead of expiry on its own; callers that know the token changed may call it.
   */
  async refresh(): Promise<boolean> {
    const ws = this.ws;
    if (this.state !== 'connected' || ws === undefined || typeof this.opts.token === 'string' || this.refreshPending) return false;
    let token: string;
    try {
      token = await this.opts.token();
    } catch (err) {
      this.report(err);
      return false;
    }
    if (ws !== this.ws || ws.readyState !== ws.OPEN || token === this.token || this.refreshPending) return false;
    this.token = token;
    this.refreshPending = true;
    ws.send(JSON.stringify({ type: 'refresh', token }));
    return true;
  }

  /** A failing token source is an `error` event when someone listens, never a crash of the supervisor. */
  private report(err: unknown): void {
    if (this.listenerCount('error') > 0) this.emit('error', err);
  }

  private scheduleRefresh(): void {
    clearTimeout(this.refreshTimer);
    if (typeof this.opts.token === 'string' || this.expiresAt === 0) return;
    const delay = refreshDelay(this.expiresAt, this.now(), this.intervalMs);
    this.refreshTimer = setTimeout(() => void this.refreshDue(), Math.min(delay, MAX_TIMER_MS));
    this.refreshTimer.unref();
  }

  private async refreshDue(): Promise<void> {
    if (this.state !== 'connected') return;
    if (refreshDelay(this.expiresAt, this.now(), this.intervalMs) > 0) return this.scheduleRefresh();
    if (await this.refresh()) return;
    // The source has nothing newer yet (or failed): ask again next interval, until the gateway closes.
    clearTimeout(this.refreshTimer);
    this.refreshTimer = setTimeout(() => void this.refreshDue(), this.intervalMs);
    this.refreshTimer.unref();
  }

  /** Connects a stream the gateway opened to the sandbox's loopback. */
  private dial(s: RelayStream): void {
    const relay = this.opts.relay === false ? undefined : this.opts.relay;
    if (this.allowPorts !== undefined && !this.allowPorts.has(s.port)) return s.refuse(OPEN_FAIL.notAllowed);
    if ((this.relay?.size ?? 0) > (relay?.maxStreams ?? 1024)) return s.refuse(OPEN_FAIL.busy);
    const sock = connect({ host: this.relayHost, port: s.port, noDelay: true, allowHalfOpen: true });
    let connected = false;
    const timer = setTimeout(() => {
      sock.destroy();
      s.refuse(OPEN_FAIL.timeout);
    }, relay?.connectTimeoutMs ?? 10_000);
    timer.unref();
    // The gateway gave up (RESET) while connecting.
    const cancel = (): void => {
      clearTimeout(timer);
      if (!connected) sock.destroy();
    };
    s.once('close', cancel);
    sock.once('error', (err: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      if (connected) return;
      s.refuse(err.code === 'ECONNREFUSED' ? OPEN_FAIL.refused : OPEN_FAIL.error);
    });
    sock.once('connect', () => {
      connected = true;
      clearTimeout(timer);
      if (s.destroyed) return void sock.destroy();
      s.accept();
      splice(sock, s);
    });
  }

  private closed(ws: WebSocket, code: number, reason: string): void {
    if (ws === this.moving) {
      this.moving = undefined;
      this.emit('moveFailed', { code, reason });
      // The old session had already ended (below): this was the only one left, so reconnect as usual.
      if (this.ws === undefined && this.state === 'connecting') this.retry(RECONNECT_AT_ONCE.has(code));
      return;
    }
    if (ws === this.leaving?.ws) {
      clearTimeout(this.leaving.timer);
      this.leaving.relay?.close();
      this.leaving = undefined;
      return;
    }
    if (ws !== this.ws) return;
    clearInterval(this.heartbeat);
    clearTimeout(this.refreshTimer);
    this.expiresAt = 0;
    this.refreshPending = false;
    this.relay?.close();
    this.relay = undefined;
    this.ws = undefined;
    if (this.state === 'stopped') return;
    this.emit('disconnected', { code, reason });
    if (this.moving !== undefined) {
      // A move is under way and the old gateway closed the old session first: it saw the new session's
      // claim before that session's `accepted` reached this supervisor. The new one becomes the session.
      this.state = 'connecting';
      return;
    }
    if (code === CLOSE.superseded || (DO_NOT_RETRY.has(code) && typeof this.opts.token === 'string')) {
      return this.finish(code, reason);
    }
    this.retry(RECONNECT_AT_ONCE.has(code));
  }

  private retry(atOnce: boolean): void {
    this.state = 'waiting';
    const delay = atOnce ? Math.floor(this.random() * 50) : backoffDelay(this.attempt++, this.backoff, this.random);
    this.timer = setTimeout(() => void this.connect(), delay);
  }

  private finish(code: number, reason: string): void {
    if (this.state === 'stopped') return;
    this.state = 'stopped';
    clearTimeout(this.timer);
    clearInterval(this.heartbeat);
    clearTimeout(this.refreshTimer);
    this.relay?.close();
    this.relay = undefined;
    const sockets = [this.ws, this.moving, this.leaving?.ws];
    clearTimeout(this.leaving?.timer);
    this.leaving?.relay?.close();
    this.ws = this.moving = this.leaving = undefined;
    for (const ws of sockets) if (ws !== undefined && (ws.readyState === ws.OPEN || ws.readyState === ws.CONNECTING)) ws.close(CLOSE.normal, 'supervisor stopping');
    this.emit('stopped', { code, reason });
  }
}

/**
 * Joins a connected socket and a relay stream. Half-closes pass through (a FIN becomes CLOSE and back);
 * a RESET or a socket error aborts the other side, the socket with an RST so the program in the sandbox
 * sees the abort rather than a clean end.
 */
function splice(sock: Socket, s: RelayStream): void {
  sock.pipe(s);
  s.pipe(sock);
  sock.once('error', (err) => s.destroy(err));
  s.once('close', () => {
    if (sock.destroyed) return;
    if (s.errored !== null || !s.readableEnded || !s.writableFinished) sock.resetAndDestroy();
  });
}

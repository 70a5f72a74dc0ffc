import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type RequestListener, type Server } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import type { PresenceRecord, PresenceStore } from './presence/presence-store.js';
import { binaryOf, DEFAULT_CHUNK_BYTES, DEFAULT_HIGH_WATER_BYTES, DEFAULT_WINDOW_BYTES, RelayMux, wsTransport } from './relay-mux.js';
import type { RelayStream } from './relay-stream.js';
import { DEFAULT_RELAY_LIMITS, LimitedRelayOpener, type RelayLimits, type RelayOpener } from './relay-opener.js';
import { listenOn, type ServerTls } from '../lib/http-listen.js';
import { ConnectionGuard } from '../lib/connection-guard.js';
import { RequestGuard } from '../lib/request-guard.js';
import { sourceGroup } from '../lib/source-address.js';
import type { ErrorCode } from '../domain/errors.js';
import { SessionRegistry } from './session-registry.js';
import { CLOSE, closeCodeLabel, FEATURES, isFrameError, negotiated, parseClientFrame, PROTOCOL_VERSION, SUBPROTOCOL, SUPERVISOR_PATH, type Feature, type Hello, type Move, type ServerMessage } from './supervisor-protocol.js';
import { SupervisorKeyFile } from './supervisor-key-file.js';
import { isTokenRejection, verifySupervisorToken, type SupervisorKey, type SupervisorKeys, type TokenRejection, type TokenSubject } from './supervisor-token.js';
import { sandboxKey } from '../domain/sandbox.js';

/**
 * `GET /v1/supervisor`: the WebSocket endpoint the supervisor inside each sandbox connects to, on its own
 * listener. Authenticates the sandbox-bound token, runs the hello handshake, keeps heartbeats both ways
 * with a missed-heartbeat timeout, records presence in the store, and closes sessions with specific codes
 * (supervisor-protocol.ts). A hostile frame closes its socket and changes no state.
 *
 * A session lasts as long as its token: the heartbeat round before the token's `exp` closes it (4440)
 * unless a `refresh` frame brought a newer token, verified exactly like the first one. Replacing the key
 * set (setKeys, on a reload of the secret file) closes at once every session whose token was signed by a
 * key that left the set (4441).
 *
 * Each accepted session also carries relay streams (relay-mux.ts): `openRelayStream()` reaches a port on
 * the loopback of a sandbox whose session this gateway holds, within the caps of RelayLimits.
 */

export interface SupervisorServerOptions {
  readonly host: string;
  readonly port: number;
  readonly keys: SupervisorKeys;
  /** The file `keys` came from: re-read every heartbeat interval, and setKeys() applied when it changes. */
  readonly keysFile?: string | undefined;
  readonly heartbeatIntervalMs: number;
  /** Intervals a session may stay silent before it is dropped (4001). Default 3. */
  readonly heartbeatMisses?: number;
  readonly helloTimeoutMs: number;
  /** Largest frame accepted (ws closes with 1009 past it). */
  readonly maxFrameBytes: number;
  readonly maxSessions: number;
  readonly maxSessionsPerSource: number;
  /** Epoch ms; the heartbeat sweep reads it, so tests can drive time. */
  readonly now?: () => number;
  /** Run the heartbeat sweep on a timer (tests turn it off and call sweep()). */
  readonly autoSweep?: boolean;
  /** Relay caps and open timeout (default 32 per sandbox, 64 per namespace, 256 overall, 10 s). */
  readonly relay?: Partial<RelayLimits>;
  /** Counts faults in the endpoint's handlers (sandgate_http_handler_errors_total{listener="supervisor"}). */
  readonly handlerErrors?: { inc(): void };
  /** Receive window per relay stream (default 256 KiB). */
  readonly relayWindowBytes?: number;
  /** WebSocket bytes not yet written out above which relay streams stop sending (default 1 MiB). */
  readonly relayHighWaterBytes?: number;
  /**
   * wss://: the endpoint speaks TLS with these server options (a certificate store's, whose `attach`
   * gets the server so a reloaded fallback pair reaches it). The bearer token then never crosses the
   * network in the clear.
   */
  readonly tls?: ServerTls;
  /** Connection cap and first-request timeouts (connection-guard.ts); default: the default limits. */
  readonly guard?: ConnectionGuard;
}

/** Silent intervals after which a session is dropped (4001), unless configured. */
export const DEFAULT_HEARTBEAT_MISSES = 3;

type State = 'hello' | 'claiming' | 'active' | 'closed';

export interface LocalSession {
  readonly sessionId: string;
  readonly namespace: string;
  readonly name: string;
  readonly source: string;
  readonly ws: WebSocket;
  readonly openedAt: number;
  state: State;
  instanceId: string;
  epoch: number;
  since: number;
  lastSeen: number;
  /** The session's relay streams, from `accepted` on. */
  mux: RelayMux | undefined;
  /** The token the session stands on (the hello's, or the last refresh's), its key id and expiry (epoch ms). */
  token: string;
  kid: string;
  expiresAt: number;
  /** A refresh is being verified: a second one before it is answered is refused. */
  refreshing: boolean;
  /** What the session uses: the features both sides announced (from hello on). */
  features: ReadonlySet<Feature>;
  /** When this gateway asked the supervisor to move (epoch ms), or 0. */
  movedAt: number;
}

export class SupervisorServer implements RelayOpener {
  private readonly http: Server;
  private readonly wss: WebSocketServer;
  private readonly registry = new SessionRegistry<LocalSession>();
  /** Sockets past the HTTP upgrade, with or without a hello yet. */
  private readonly open = new Set<LocalSession>();
  private readonly perSource = new Map<string, number>();
  private pending = 0;
  private sweeper: NodeJS.Timeout | undefined;
  /** While draining: the sessions asked to move and not gone yet, and what to call once none is left. */
  private draining: { readonly pending: Set<LocalSession>; readonly done: () => void } | undefined;
  /** When the sweep next pings every session (the sweep itself runs four times per interval). */
  private nextPingAt = Number.NEGATIVE_INFINITY;
  private shuttingDown = false;
  private readonly now: () => number;
  /** The key set tokens are verified with (setKeys replaces it) and how often it was replaced. */
  private keys: SupervisorKeys;
  private keysGeneration = 0;
  private readonly keysFile: SupervisorKeyFile | undefined;
  private readonly unsubscribe: (() => void)[] = [];
  /** Supervisors asked to move, by reason, for metrics. */
  readonly moves = new Map<Move['reason'], number>();
  /** Closes by close code label (closeCodeLabel()), for metrics. */
  readonly closes = new Map<string, number>();
  /** Relay streams over this gateway's sessions, with their caps. */
  readonly relay: LimitedRelayOpener;
  port = 0;

  constructor(
    private readonly opts: SupervisorServerOptions,
    private readonly store: PresenceStore,
    private readonly log: Logger,
  ) {
    this.now = opts.now ?? Date.now;
    this.keys = opts.keys;
    this.keysFile =
      opts.keysFile === undefined
        ? undefined
        : new SupervisorKeyFile({
            path: opts.keysFile,
            audience: opts.keys.audience,
            initial: opts.keys,
            onChange: (next) => {
              this.log.info({ kids: next.keys.map((k) => k.kid) }, 'supervisor keys reloaded');
              this.setKeys(next);
            },
            onError: (err) => this.log.warn({ err }, err.message),
          });
    // A supervisor that did not announce `relay` is never sent an OPEN: to the caller it holds no session here.
    this.relay = new LimitedRelayOpener((ns, name) => this.relaySession(ns, name)?.mux, { ...DEFAULT_RELAY_LIMITS, ...opts.relay });
    const notWebSocket: RequestListener = (_req, res) => {
      res.writeHead(426, { 'content-type': 'application/json', upgrade: 'websocket' });
      res.end(JSON.stringify({ code: 'upgrade_required', message: `connect with a WebSocket to ${SUPERVISOR_PATH}` }));
    };
    if (opts.tls === undefined) this.http = createServer(notWebSocket);
    else {
      const https = createHttpsServer(opts.tls.options, notWebSocket);
      opts.tls.attach(https);
      this.http = https;
    }
    this.wss = new WebSocketServer({
      noServer: true,
      maxPayload: opts.maxFrameBytes,
      handleProtocols: (protocols) => (protocols.has(SUBPROTOCOL) ? SUBPROTOCOL : false),
    });
    const guard = new RequestGuard('supervisor', log, opts.handlerErrors);
    this.http.on('upgrade', (req, socket, head) => {
      this.upgrade(req, socket, head).catch((err: unknown) => guard.failUpgrade(err, req, socket));
    });
    this.unsubscribe.push(
      store.onChange((ns, name, record) => this.onPresenceChange(ns, name, record)),
      store.onLost((record) => this.onPresenceLost(record)),
    );
  }

  /** Live sessions (accepted, presence claimed) on this gateway. */
  get size(): number {
    return this.registry.size;
  }

  /** Sockets open, including those still before hello. */
  get connections(): number {
    return this.open.size;
  }

  session(namespace: string, name: string): LocalSession | undefined {
    const s = this.registry.get(namespace, name);
    return s?.state === 'active' ? s : undefined;
  }

  private relaySession(namespace: string, name: string): LocalSession | undefined {
    const s = this.session(namespace, name);
    return s?.features.has('relay') === true ? s : undefined;
  }

  /** Accepted sessions here, in the order they were accepted. */
  sessions(): IterableIterator<LocalSession> {
    return this.registry.values();
  }

  /**
   * Asks the supervisor of `s` to move its session (to `gateway` when given): true when the message was
   * sent, false when the session cannot move (it did not announce `move`, or is not active).
   */
  move(s: LocalSession, gateway: string | undefined, reason: Move['reason']): boolean {
    if (s.state !== 'active' || !s.features.has('move')) return false;
    s.movedAt = this.now();
    this.moves.set(reason, (this.moves.get(reason) ?? 0) + 1);
    this.send(s, { type: 'move', reason, ...(gateway === undefined ? {} : { gateway }) });
    return true;
  }

  /** A byte stream to `127.0.0.1:<port>` in the sandbox, over its session here (relay-opener.ts). */
  openRelayStream(namespace: string, name: string, port: number, signal?: AbortSignal): Promise<RelayStream> {
    return this.relay.openRelayStream(namespace, name, port, signal);
  }

  async start(): Promise<number> {
    this.port = await listenOn(this.http, this.opts.host, this.opts.port, this.opts.guard ?? new ConnectionGuard('supervisor'));
    if (this.opts.autoSweep !== false) {
      // Four sweeps per interval: a silent session is dropped within a quarter interval of its deadline.
      this.sweeper = setInterval(() => this.sweep(), Math.max(10, Math.floor(this.opts.heartbeatIntervalMs / 4)));
      this.sweeper.unref();
    }
    this.keysFile?.start(this.opts.heartbeatIntervalMs);
    return this.port;
  }

  /**
   * One heartbeat round: pings every accepted session once per interval, and closes sessions silent for
   * `heartbeatMisses` intervals, sockets that sent no hello within the hello timeout, and sessions whose
   * token expires before the next interval (so no session outlives its token's `exp`). Runs four times
   * per heartbeat interval.
   *
   * A silent session is not closed in the round that finds it overdue but just after, once the frames
   * already waiting on the sockets have been read: timers run before I/O in Node's event loop, so on a
   * gateway whose loop was busy (full CPU, a long GC) a round can fire while a supervisor's ping sits unread
   * in the socket buffer. The re-check runs two check phases later (setImmediate twice), so at least one
   * poll phase, which reads that ping, comes between; ws emits messages synchronously as it reads them.
   */
  sweep(): void {
    const now = this.now();
    const interval = this.opts.heartbeatIntervalMs;
    const ping = now >= this.nextPingAt;
    if (ping) this.nextPingAt = now + interval;
    const overdue: LocalSession[] = [];
    for (const s of this.open) {
      if (s.state === 'closed') continue;
      if (s.expiresAt - now < interval) {
        this.send(s, { type: 'rejected', code: 'session_expired', message: 'the session token expires before the next heartbeat: refresh it earlier' });
        this.closeSession(s, CLOSE.tokenExpired, 'token expired (no refresh)');
      } else if (s.state === 'hello') {
        if (now - s.openedAt >= this.opts.helloTimeoutMs) this.closeSession(s, CLOSE.helloTimeout, 'no hello within the hello timeout');
      } else if (s.state === 'active') {
        if (this.silent(s, now)) overdue.push(s);
        else if (ping) this.send(s, { type: 'ping', t: now });
      }
    }
    if (overdue.length > 0) setImmediate(() => setImmediate(() => this.dropSilent(overdue, now)));
  }

  /** Whether `s` has sent nothing for `heartbeatMisses` intervals as of `now`. */
  private silent(s: LocalSession, now: number): boolean {
    return now - s.lastSeen >= (this.opts.heartbeatMisses ?? DEFAULT_HEARTBEAT_MISSES) * this.opts.heartbeatIntervalMs;
  }

  /** Closes the sessions a sweep at `at` found silent that still are, now that pending frames were read. */
  private dropSilent(overdue: readonly LocalSession[], at: number): void {
    for (const s of overdue) if (s.state === 'active' && this.silent(s, at)) this.closeSession(s, CLOSE.heartbeatTimeout, 'missed heartbeats', true);
  }

  /** The age (ms) of the oldest silence among accepted sessions: how long the quietest has sent nothing. */
  oldestSilenceMs(): number {
    const now = this.now();
    let oldest = 0;
    for (const s of this.open) if (s.state === 'active') oldest = Math.max(oldest, now - s.lastSeen);
    return oldest;
  }

  /**
   * Replaces the key set (a reload of the secret file). A session whose token was signed by a key that
   * left the set is closed at once with 4441; one whose key id stayed but whose secret or audience changed
   * has its token verified again and is closed the same way when it no longer passes.
   */
  setKeys(keys: SupervisorKeys): void {
    const before = this.keys;
    this.keys = keys;
    this.keysGeneration++;
    const same = (k: SupervisorKey | undefined, kid: string): boolean => {
      const old = before.keys.find((x) => x.kid === kid);
      return k !== undefined && old !== undefined && Buffer.compare(Buffer.from(k.secret), Buffer.from(old.secret)) === 0;
    };
    for (const s of [...this.open]) {
      if (s.state === 'closed') continue;
      const k = keys.keys.find((x) => x.kid === s.kid);
      if (k === undefined) {
        this.revoke(s, 'the key that signed the session token was removed');
      } else if (!same(k, s.kid) || keys.audience !== before.audience) {
        const token = s.token;
        void verifySupervisorToken(keys, token, this.now()).then((v) => {
          if (isTokenRejection(v) && s.state !== 'closed' && s.token === token) this.revoke(s, v.message);
        });
      }
    }
  }

  private revoke(s: LocalSession, message: string): void {
    this.send(s, { type: 'rejected', code: 'signing_key_revoked', message });
    this.closeSession(s, CLOSE.keyRevoked, 'signing key revoked');
  }

  /** Verifies a token against the current key set, again if the set was replaced meanwhile. */
  private async verify(token: string | undefined): Promise<TokenSubject | TokenRejection> {
    for (;;) {
      const generation = this.keysGeneration;
      const v = await verifySupervisorToken(this.keys, token, this.now());
      if (generation === this.keysGeneration) return v;
    }
  }

  /**
   * Drain before close (SIGTERM, with peers to take the sessions): no new session is accepted; every
   * supervisor that announced `move` is asked to move, to `gateways` in turn (undefined: to any), and the
   * others are told "service restart" (1012) as close() would. Resolves once every session asked has left
   * (the epoch fence closed it when its new session was seen), or after `ms`.
   */
  async drain(gateways: readonly (string | undefined)[], ms: number): Promise<void> {
    this.shuttingDown = true;
    const pending = new Set<LocalSession>();
    let i = 0;
    for (const s of [...this.registry.values()]) {
      if (s.state !== 'active') continue;
      if (this.move(s, gateways.length === 0 ? undefined : gateways[i++ % gateways.length], 'drain')) pending.add(s);
      else this.closeSession(s, CLOSE.serviceRestart, 'service restart');
    }
    if (pending.size === 0) return;
    this.log.info({ moving: pending.size, gateways: gateways.length }, 'draining: supervisors asked to move');
    let timer: NodeJS.Timeout | undefined;
    await new Promise<void>((resolve) => {
      this.draining = { pending, done: resolve };
      timer = setTimeout(resolve, ms);
    });
    clearTimeout(timer);
    this.draining = undefined;
  }

  /**
   * Graceful shutdown: every session is closed with 1012 (service restart) so supervisors reconnect
   * elsewhere at once. Presence is not released per session here: the caller closes the store with
   * `release: true`, which drops this gateway's lease and records in one step.
   */
  async close(): Promise<void> {
    this.shuttingDown = true;
    clearInterval(this.sweeper);
    this.keysFile?.stop();
    for (const u of this.unsubscribe) u();
    for (const s of [...this.open]) this.closeSession(s, CLOSE.serviceRestart, 'service restart');
    this.wss.close();
    await new Promise<void>((resolve) => {
      this.http.close(() => resolve());
      this.http.closeAllConnections();
    });
  }

  /**
   * Answers the upgrade request with a typed HTTP error and closes the socket once the answer is written:
   * a peer that never reads it or never closes its side keeps nothing of the gateway's.
   */
  private reject(socket: Duplex, status: number, code: ErrorCode, message: string): void {
    const body = JSON.stringify({ code, message });
    socket.once('finish', () => socket.destroy());
    socket.end(
      `HTTP/1.1 ${status} ${code}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  }

  private async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    socket.on('error', () => socket.destroy());
    const url = req.url ?? '/';
    const path = url.split('?', 1)[0];
    if (path !== SUPERVISOR_PATH) return this.reject(socket, 404, 'not_found', `the supervisor endpoint is ${SUPERVISOR_PATH}`);
    const offered = (req.headers['sec-websocket-protocol'] ?? '').split(',').map((p) => p.trim());
    if (!offered.includes(SUBPROTOCOL)) return this.reject(socket, 400, 'unsupported_subprotocol', `offer the subprotocol ${SUBPROTOCOL}`);
    if (this.shuttingDown) return this.reject(socket, 503, 'service_restart', 'the gateway is shutting down');
    // Authenticated before anything is counted or upgraded: a socket without a valid token is answered
    // 401 on its HTTP request and closed, so it never holds a session slot (docs/supervisor-protocol.md).
    const auth = req.headers.authorization;
    const token = auth !== undefined && /^Bearer /i.test(auth) ? auth.slice(7).trim() : undefined;
    const subject = await this.verify(token);
    if (socket.destroyed) return;
    if (isTokenRejection(subject)) {
      this.log.debug({ code: subject.code, source: (socket as Socket).remoteAddress }, 'supervisor upgrade refused: no valid token');
      return this.reject(socket, 401, subject.code, subject.message);
    }
    const source = sourceGroup((socket as Socket).remoteAddress ?? 'unknown');
    const fromSource = this.perSource.get(source) ?? 0;
    if (this.open.size + this.pending >= this.opts.maxSessions) return this.reject(socket, 503, 'too_many_sessions', 'the gateway holds its maximum of supervisor sessions');
    if (fromSource >= this.opts.maxSessionsPerSource) return this.reject(socket, 429, 'too_many_sessions', 'too many supervisor sessions from this address');
    this.perSource.set(source, fromSource + 1);
    this.pending++;
    let upgraded = false;
    // ws aborts a malformed handshake without calling back: the counts must not leak then.
    socket.once('close', () => {
      if (upgraded) return;
      this.pending--;
      this.releaseSource(source);
    });
    this.wss.handleUpgrade(req, socket, head, (ws) => {
      this.pending--;
      upgraded = true;
      const s: LocalSession = {
        sessionId: randomUUID(),
        namespace: subject.namespace,
        name: subject.name,
        source,
        ws,
        openedAt: this.now(),
        state: 'hello',
        instanceId: '',
        epoch: 0,
        since: 0,
        lastSeen: this.now(),
        mux: undefined,
        token: token ?? '',
        kid: subject.kid,
        expiresAt: subject.expiresAt,
        refreshing: false,
        features: new Set(),
        movedAt: 0,
      };
      this.open.add(s);
      ws.on('close', (code: number) => this.closed(s, code));
      ws.on('error', (err) => this.log.debug({ err, sessionId: s.sessionId }, 'supervisor socket error'));
      ws.on('message', (data, isBinary) => this.frame(s, subject, data, isBinary));
    });
  }

  private frame(s: LocalSession, subject: TokenSubject, data: RawData, isBinary: boolean): void {
    if (s.state === 'closed') return;
    s.lastSeen = this.now();
    if (isBinary) {
      // Relay frames: legal only once the session is accepted.
      if (s.state !== 'active' || s.mux === undefined) return this.closeSession(s, CLOSE.unexpected, 'binary frames before accepted');
      const bad = s.mux.receive(binaryOf(data));
      if (bad !== undefined) this.closeSession(s, bad.close, bad.message);
      return;
    }
    const m = parseClientFrame(data.toString());
    if (isFrameError(m)) return this.closeSession(s, m.close, m.message);
    switch (m.type) {
      case 'hello':
        if (s.state !== 'hello') return this.closeSession(s, CLOSE.unexpected, 'a second hello');
        if (m.namespace !== subject.namespace || m.name !== subject.name) {
          this.send(s, { type: 'rejected', code: 'sandbox_mismatch', message: 'hello names a sandbox other than the token' });
          return this.closeSession(s, CLOSE.forbidden, 'hello names a sandbox other than the token');
        }
        return void this.hello(s, m);
      case 'refresh':
        if (s.state !== 'active') return this.closeSession(s, CLOSE.unexpected, 'refresh before accepted');
        if (s.refreshing) return this.closeSession(s, CLOSE.unexpected, 'a refresh while another is being verified');
        return void this.refresh(s, m.token);
      case 'ping':
        if (s.state !== 'active') return this.closeSession(s, CLOSE.unexpected, 'ping before accepted');
        return this.send(s, { type: 'pong', t: m.t });
      case 'pong':
        if (s.state !== 'active') return this.closeSession(s, CLOSE.unexpected, 'pong before accepted');
        return;
    }
  }

  /** A `refresh` frame: the same checks as the hello token (signature, key, audience, expiry, sandbox). */
  private async refresh(s: LocalSession, token: string): Promise<void> {
    s.refreshing = true;
    const v = await this.verify(token);
    s.refreshing = false;
    if (s.state !== 'active') return;
    if (isTokenRejection(v)) {
      this.send(s, { type: 'rejected', code: v.code, message: v.message });
      return this.closeSession(s, CLOSE.unauthorized, v.message);
    }
    if (v.namespace !== s.namespace || v.name !== s.name) {
      this.send(s, { type: 'rejected', code: 'sandbox_mismatch', message: 'the refresh token names a sandbox other than the session' });
      return this.closeSession(s, CLOSE.forbidden, 'the refresh token names a sandbox other than the session');
    }
    s.token = token;
    s.kid = v.kid;
    s.expiresAt = v.expiresAt;
    this.send(s, { type: 'refreshed', expiresAt: v.expiresAt });
    this.log.debug({ sandbox: sandboxKey(s.namespace, s.name), sessionId: s.sessionId, kid: v.kid, expiresAt: v.expiresAt }, 'supervisor token refreshed');
  }

  private async hello(s: LocalSession, m: Hello): Promise<void> {
    s.state = 'claiming';
    s.instanceId = m.instanceId;
    s.features = new Set(negotiated(FEATURES, m.features));
    s.since = this.now();
    const old = this.registry.put(s);
    if (old !== undefined) this.closeSession(old, CLOSE.superseded, 'superseded by a newer session');
    let record: PresenceRecord;
    try {
      record = await this.store.claim(s.namespace, s.name, { sessionId: s.sessionId, instanceId: s.instanceId, since: s.since });
    } catch (err) {
      this.log.error({ err, sandbox: sandboxKey(s.namespace, s.name) }, 'presence claim failed');
      return this.closeSession(s, CLOSE.internal, 'could not record the session');
    }
    s.epoch = record.epoch;
    if (s.state !== 'claiming') {
      // Closed (or superseded) while claiming: undo our claim if it is still ours.
      if (this.registry.removeIfCurrent(s) || this.store.get(s.namespace, s.name)?.sessionId === s.sessionId) {
        await this.release(s);
      }
      return;
    }
    s.state = 'active';
    s.lastSeen = this.now();
    s.mux = new RelayMux({
      role: 'gateway',
      transport: wsTransport(s.ws),
      windowBytes: this.opts.relayWindowBytes ?? DEFAULT_WINDOW_BYTES,
      // The supervisor accepts large frames; 64 KiB keeps one stream from holding the socket for long.
      maxChunkBytes: DEFAULT_CHUNK_BYTES,
      highWaterBytes: this.opts.relayHighWaterBytes ?? DEFAULT_HIGH_WATER_BYTES,
    });
    this.send(s, {
      type: 'accepted',
      sessionId: s.sessionId,
      epoch: record.epoch,
      heartbeatIntervalMs: this.opts.heartbeatIntervalMs,
      maxFrameBytes: this.opts.maxFrameBytes,
      expiresAt: s.expiresAt,
      protocol: PROTOCOL_VERSION,
      features: [...s.features],
    });
    this.log.info({ sandbox: sandboxKey(s.namespace, s.name), sessionId: s.sessionId, epoch: record.epoch, instanceId: s.instanceId, version: m.version, protocol: m.protocol ?? 1 }, 'supervisor session accepted');
  }

  private onPresenceChange(namespace: string, name: string, record: PresenceRecord | undefined): void {
    const local = this.registry.get(namespace, name);
    if (local === undefined || local.state !== 'active' || record === undefined) return;
    if (record.sessionId !== local.sessionId && record.epoch > local.epoch) {
      // A newer claim elsewhere (the supervisor reconnected to another gateway): this socket is stale.
      this.closeSession(local, CLOSE.superseded, 'superseded by a newer session on another gateway');
    }
  }

  private onPresenceLost(record: PresenceRecord): void {
    const local = this.registry.get(record.namespace, record.name);
    if (local !== undefined && local.sessionId === record.sessionId) this.closeSession(local, CLOSE.presenceLost, 'presence lost to a newer session');
  }

  private send(s: LocalSession, m: ServerMessage): void {
    if (s.ws.readyState === s.ws.OPEN) s.ws.send(JSON.stringify(m));
  }

  /** Closes a socket with a code. `hard` also terminates it: a peer that stopped answering may never ack. */
  private closeSession(s: LocalSession, code: number, reason: string, hard = false): void {
    if (s.state === 'closed') return;
    const wasActive = s.state === 'active' || s.state === 'claiming';
    s.state = 'closed';
    const label = closeCodeLabel(code);
    this.closes.set(label, (this.closes.get(label) ?? 0) + 1);
    if (wasActive) this.log.info({ sandbox: sandboxKey(s.namespace, s.name), sessionId: s.sessionId, code, reason }, 'supervisor session closed');
    else this.log.debug({ sessionId: s.sessionId, code, reason, source: s.source }, 'supervisor socket refused');
    s.ws.close(code, reason.slice(0, 123));
    if (hard) s.ws.terminate();
    this.cleanup(s);
  }

  /** The socket closed (by either side); `code` is the peer's close code, or 1006 when it sent none. */
  private closed(s: LocalSession, code: number): void {
    if (s.state !== 'closed') {
      const wasActive = s.state === 'active';
      s.state = 'closed';
      const label = closeCodeLabel(code);
      this.closes.set(label, (this.closes.get(label) ?? 0) + 1);
      if (wasActive) this.log.info({ sandbox: sandboxKey(s.namespace, s.name), sessionId: s.sessionId, code }, 'supervisor disconnected');
      this.cleanup(s);
    }
    if (this.open.delete(s)) this.releaseSource(s.source);
  }

  private cleanup(s: LocalSession): void {
    s.mux?.close();
    if (this.draining?.pending.delete(s) === true && this.draining.pending.size === 0) this.draining.done();
    if (this.shuttingDown) {
      this.registry.removeIfCurrent(s);
      return;
    }
    if (this.registry.removeIfCurrent(s) && s.epoch > 0) void this.release(s);
  }

  private async release(s: LocalSession): Promise<void> {
    try {
      await this.store.release(s.namespace, s.name, s.sessionId);
    } catch (err) {
      this.log.warn({ err, sandbox: sandboxKey(s.namespace, s.name) }, 'presence release failed');
    }
  }

  private releaseSource(source: string): void {
    const n = (this.perSource.get(source) ?? 1) - 1;
    if (n <= 0) this.perSource.delete(source);
    else this.perSource.set(source, n);
  }
}

import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { SandgateError } from '../../domain/errors.js';
import { PeerLeases } from './peer-leases.js';
import { ListenerSet } from './presence-listeners.js';
import { PresenceShard, type ShardHost } from './presence-shard.js';
import { Rounds } from './rounds.js';
import type { LiveLease, PresenceListener, PresenceRecord, PresenceStore, SessionClaim } from './presence-store.js';
import { createRedisClient, describeRedisTarget, keepConnecting, topologyOf, type RedisClient, type RedisConnectionOptions, type RedisTarget } from '../../lib/redis-connection.js';
import { disconnect, errorText, loadScripts } from './redis-script-runner.js';
import { fieldOf } from './redis-codec.js';
import { SCRIPTS, shardOf } from './redis-scripts.js';

export interface RedisPresenceOptions {
  /** redis://… or rediss://… (for Sentinel and Cluster, see redisOptions). */
  readonly url: string;
  /** ioredis options; Sentinel: `sentinels` + `name`; Cluster: `cluster: [{host, port}]`. */
  readonly redisOptions?: RedisConnectionOptions;
  readonly gatewayId: string;
  /** Gateway lease lifetime; renewed every third of it. Default 2000. */
  readonly leaseTtlMs?: number;
  /** Full re-scan period (heals anything the change stream missed; collects dead records). Default 30000. */
  readonly rescanMs?: number;
  /** Key prefix, used in the hash tag of every key. Default 'sandgate'. */
  readonly keyPrefix?: string;
  /** Shards presence is split into (docs/presence.md, "Shards"); every gateway must use the same. Default 1. */
  readonly shards?: number;
  /** Published with the lease so peers can reach this gateway (e.g. its relay address). */
  readonly gatewayInfo?: Readonly<Record<string, string>>;
  readonly log: Logger;
  /** Local clock (ms), for lease deadlines. Default Date.now. */
  readonly now?: () => number;
}

export const DEFAULT_LEASE_TTL_MS = 2000;
export const DEFAULT_RESCAN_MS = 30_000;

/** The queue key of the scans (shards scan one at a time); never a sandbox's, which always holds a '/'. */
const SCANS = 'scans';

/** Creates the Redis presence store; call start() to connect and load the mirror. */
export function createRedisPresence(opts: RedisPresenceOptions): RedisPresence {
  return new RedisPresence(opts);
}

/**
 * Cluster-wide presence through Redis (docs/presence.md). Presence is split into shards by sandbox
 * (presence-shard.ts: keys, mirror, term and change stream of one shard); this class owns what the shards
 * share: the two connections, the per-sandbox operation queue, the listeners, and the two background loops:
 * lease renewals every TTL/3, and apart from them the shards' other work (queued writes, scans). Reads are served from the shards' mirrors, so
 * get()/list() never touch Redis. While Redis is unreachable, local claims and releases still apply to the
 * mirrors, are queued, and degraded() says why.
 */
export class RedisPresence implements PresenceStore {
  readonly kind = 'redis' as const;
  readonly gatewayId: string;
  private readonly log: Logger;
  private readonly now: () => number;
  private readonly ttlMs: number;
  private readonly renewMs: number;
  private readonly rescanMs: number;
  private readonly target: RedisTarget;
  private readonly main: RedisClient;
  private readonly sub: RedisClient;
  private readonly shards: readonly PresenceShard[];
  private readonly byChannel: ReadonlyMap<string, PresenceShard>;
  private readonly peers: PeerLeases;
  private readonly changes = new ListenerSet<[string, string, PresenceRecord | undefined]>();
  private readonly losses = new ListenerSet<[PresenceRecord]>();
  /**
   * Per-sandbox queue, so a claim, a release and a re-assert of one sandbox never interleave; the scans
   * queue under SCANS.
   */
  private readonly chains = new Map<string, Promise<unknown>>();
  private problem: string | undefined;
  private subProblem: string | undefined = 'presence store subscription not started';
  /** Set while a live peer's lease names another shard count than this gateway's: nothing is written meanwhile. */
  private mismatch: SandgateError | undefined;
  private subscribing: Promise<void> | undefined;
  /**
   * SCRIPT LOAD on this connection: not tried yet (undefined), in flight, or 'tried' (a failure is not
   * retried: EVALSHA falls back to EVAL).
   */
  private scripts: Promise<void> | 'tried' | undefined;
  private readonly commandTimeoutMs: number;
  private readonly renewals: Rounds;
  private readonly work: Rounds;
  private rescanTimer: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(opts: RedisPresenceOptions) {
    this.gatewayId = opts.gatewayId;
    this.log = opts.log.child({ part: 'presence', gatewayId: opts.gatewayId });
    this.now = opts.now ?? Date.now;
    this.ttlMs = opts.leaseTtlMs ?? DEFAULT_LEASE_TTL_MS;
    this.renewMs = Math.floor(this.ttlMs / 3);
    this.rescanMs = opts.rescanMs ?? DEFAULT_RESCAN_MS;
    this.renewals = new Rounds(() => this.renewRound(), this.renewMs);
    this.work = new Rounds(() => this.tick(), this.renewMs);
    const shardCount = opts.shards ?? 1;
    // The config schema validates these for operators; this guards other callers against a busy loop.
    assert(opts.gatewayId !== '', 'gatewayId must not be empty');
    assert(Number.isInteger(this.ttlMs) && this.ttlMs >= 30, 'leaseTtlMs must be an integer of at least 30');
    assert(Number.isInteger(this.rescanMs) && this.rescanMs >= 10, 'rescanMs must be an integer of at least 10');
    assert(Number.isInteger(shardCount) && shardCount >= 1, 'shards must be an integer of at least 1');
    // A command must fail well inside one renewal period's slack, or a hung Redis would stall the tick;
    // capped so a claim during a Redis hang delays a session's acceptance by at most 2 s, once.
    this.commandTimeoutMs = Math.min(2000, Math.max(250, Math.floor(this.ttlMs / 2)));
    this.target = { url: opts.url, options: opts.redisOptions };
    this.main = createRedisClient(this.target, { name: `sandgate-presence:${opts.gatewayId}`, commandTimeoutMs: this.commandTimeoutMs });
    this.sub = createRedisClient(this.target, { name: `sandgate-presence-sub:${opts.gatewayId}`, commandTimeoutMs: this.commandTimeoutMs });
    const host: ShardHost = {
      gatewayId: this.gatewayId,
      incarnation: randomUUID(),
      info: opts.gatewayInfo ?? {},
      log: this.log,
      now: this.now,
      ttlMs: this.ttlMs,
      renewMs: this.renewMs,
      commandTimeoutMs: this.commandTimeoutMs,
      shards: shardCount,
      cluster: topologyOf(this.target) === 'cluster',
      main: this.main,
      writable: () => this.writable(),
      offline: () => this.closed || this.problem !== undefined,
      setOnline: () => this.setOnline(),
      loadScripts: () => this.loadScripts(),
      oneScanAtATime: (fn) => this.serial(SCANS, fn),
      kick: () => void this.kick(),
      renewNow: () => void this.renewals.kick(),
      serial: (field, fn) => this.serial(field, fn),
      busy: (field) => this.chains.has(field),
      layoutMismatch: (stored) => this.setMismatch(stored, shardCount),
    };
    const events = {
      change: (namespace: string, name: string, record: PresenceRecord | undefined) => this.report(this.changes.emit(namespace, name, record), 'change'),
      lost: (record: PresenceRecord) => {
        this.log.warn({ namespace: record.namespace, name: record.name, sessionId: record.sessionId, epoch: record.epoch }, 'local session superseded by a newer claim');
        this.report(this.losses.emit(record), 'lost');
      },
      lease: (gatewayId: string) => this.peers.refresh(gatewayId),
    };
    this.shards = Array.from({ length: shardCount }, (_, k) => new PresenceShard(k, opts.keyPrefix ?? 'sandgate', host, events));
    this.peers = new PeerLeases(this.shards.map((s) => s.mirror));
    this.byChannel = new Map(this.shards.map((s) => [s.keys.channel, s] as const));
  }

  async start(): Promise<void> {
    this.log.info({ redis: describeRedisTarget(this.target), shards: this.shards.length }, 'presence store connecting');
    this.main.on('ready', () => {
      this.scripts = undefined;
      for (const s of this.shards) s.reconnected();
      void this.renewals.kick();
      void this.kick();
    });
    if (topologyOf(this.target) === 'cluster') {
      // The node map changed (a slot moved, a replica was promoted): the renewal checks the terms at once.
      this.main.on('+node', () => void this.renewals.kick());
      this.main.on('-node', () => void this.renewals.kick());
    }
    this.main.on('error', (err: Error) => this.setOffline(err));
    keepConnecting(this.main, () => !this.closed);
    keepConnecting(this.sub, () => !this.closed);
    // 'close' follows the 'error' that says why; keep that reason rather than a generic one.
    this.main.on('close', () => {
      if (this.problem === undefined) this.setOffline(new Error('connection closed'));
    });
    this.sub.on('ready', () => void this.subscribe());
    this.sub.on('error', (err: Error) => this.setSubDown(err));
    this.sub.on('close', () => {
      if (this.subProblem === undefined) this.setSubDown(new Error('connection closed'));
    });
    this.sub.on('message', (channel: string, text: string) => this.byChannel.get(channel)?.onMessage(text));
    // A failed or slow first connect is not fatal: ioredis keeps retrying, the store serves local
    // sessions meanwhile and reports degraded, and the 'ready' handler loads the mirror when it connects.
    let waited: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled([this.main.connect(), this.sub.connect()]),
      new Promise((resolve) => (waited = setTimeout(resolve, Math.min(this.ttlMs, 5000)))),
    ]);
    clearTimeout(waited);
    if (this.main.status !== 'ready' && this.problem === undefined) this.setOffline(new Error(`not connected yet (${this.main.status})`));
    // A first renewal in every shard (a disagreeing shard count shows in shard 0), then the mirror's load.
    await this.renewals.kick();
    await Promise.all(this.shards.map((s) => s.settled()));
    await this.kick();
    // Joining a fleet that shards otherwise would break fencing: refuse to start (docs/errors.md), leaving
    // no timer or connection behind.
    if (this.mismatch !== undefined) {
      const refused = this.mismatch;
      await this.close({ release: false });
      throw refused;
    }
    this.rescanTimer = setInterval(() => {
      for (const s of this.shards) s.wantReload();
      void this.kick();
    }, this.rescanMs);
    this.rescanTimer.unref();
  }

  async claim(namespace: string, name: string, session: SessionClaim): Promise<PresenceRecord> {
    const field = fieldOf(namespace, name);
    return this.serial(field, () => this.shardFor(field).claim(field, namespace, name, session));
  }

  /**
   * Removes this gateway's session for the sandbox if it is the current one here, and Redis's record if it
   * is still this session's (remove-if-current). Returns whether the session was current here.
   */
  async release(namespace: string, name: string, sessionId: string): Promise<boolean> {
    const field = fieldOf(namespace, name);
    return this.serial(field, () => this.shardFor(field).release(field, sessionId));
  }

  get(namespace: string, name: string): PresenceRecord | undefined {
    const field = fieldOf(namespace, name);
    return this.shardFor(field).mirror.get(field);
  }

  *list(): Iterable<PresenceRecord> {
    for (const s of this.shards) yield* s.mirror.list();
  }

  onChange(listener: PresenceListener): () => void {
    return this.changes.add(listener);
  }

  onLost(listener: (record: PresenceRecord) => void): () => void {
    return this.losses.add(listener);
  }

  degraded(): string[] {
    const out: string[] = [];
    if (this.problem !== undefined) out.push(this.problem);
    else for (const s of this.shards) if (s.problem !== undefined) out.push(`presence store redis unreachable: ${s.problem}`);
    if (this.subProblem !== undefined && this.problem === undefined) out.push(`${this.subProblem} (connection ${this.sub.status})`);
    if (this.mismatch !== undefined) out.push(`${this.mismatch.code}: ${this.mismatch.message}`);
    if (this.problem === undefined) {
      for (const s of this.shards) {
        const waiting = s.waiting();
        if (waiting !== undefined) out.push(waiting);
      }
    }
    return out;
  }

  /** The shard count and each shard's term on its master (undefined: not adopted on this connection yet). */
  terms(): (number | undefined)[] {
    return this.shards.map((s) => s.currentTerm());
  }

  /**
   * The attributes a live gateway published with its lease (e.g. its relay address): one lookup in the
   * lease map derived from the shards' mirrors (peer-leases.ts: live in at least one shard).
   */
  gatewayInfo(gatewayId: string): Readonly<Record<string, string>> | undefined {
    return this.peers.get(gatewayId)?.info;
  }

  gatewayLeases(): LiveLease[] {
    const now = this.now();
    return Array.from(this.peers.values(), (l) => ({ gatewayId: l.gatewayId, info: l.info, expiresInMs: Math.max(0, l.deadline - now) }));
  }

  async close(opts: { release: boolean }): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.rescanTimer);
    for (const s of this.shards) s.stop();
    await Promise.allSettled([this.renewals.stop(), this.work.stop(), ...this.shards.map((s) => s.settled()), ...this.chains.values()]);
    if (opts.release && this.main.status === 'ready' && this.mismatch === undefined) {
      try {
        let n = 0;
        for (const s of this.shards) n += await s.leave();
        this.log.info({ released: n }, 'presence released: lease and sessions deleted');
      } catch (err) {
        this.log.warn({ err }, 'presence release on close failed; peers drop this gateway when its lease expires');
      }
    }
    disconnect(this.main);
    disconnect(this.sub);
  }

  private shardFor(field: string): PresenceShard {
    return this.shards[shardOf(field, this.shards.length)]!;
  }

  private writable(): boolean {
    return !this.closed && this.problem === undefined && this.mismatch === undefined && this.main.status === 'ready';
  }

  /** Runs `fn` after everything queued earlier under `key` (a sandbox's field, or SCANS). */
  private serial<T>(key: string, fn: () => Promise<T>): Promise<T> {
    const run = (this.chains.get(key) ?? Promise.resolve()).then(fn, fn);
    const tail = run.catch(() => undefined);
    this.chains.set(key, tail);
    void tail.then(() => {
      if (this.chains.get(key) === tail) this.chains.delete(key);
    });
    return run;
  }

  /** Runs a round of the shards' work now (or once more right after the running one). */
  private kick(): Promise<void> {
    return this.work.kick();
  }

  /**
   * One renewal in every shard: shard 0 first (see below), then the others side by side. Those are not
   * awaited: the next round starts TTL/3 after shard 0's renewal, so a shard whose master hangs delays no
   * other shard's renewal (its own next one starts once it has failed; docs/presence.md, Timing).
   */
  private async renewRound(): Promise<void> {
    if (this.main.status !== 'ready') return;
    if (this.scripts !== 'tried') await this.loadScripts();
    // Every gateway renews in shard 0, whatever its shard count, so a disagreeing count shows there; until
    // it agrees no other shard is touched (a shard a peer never reads must get no lease, term or record).
    const first = await this.shards[0]!.renew();
    if (first === 'mismatch') return;
    const others = this.shards.slice(1).map((s) => s.renew());
    if (this.mismatch === undefined) return;
    const rounds = [first, ...(await Promise.all(others))];
    if (rounds.every((r) => r === 'done')) {
      this.log.info({ shards: this.shards.length }, 'presence shard count agrees with the live gateways again; writing to Redis');
      this.mismatch = undefined;
      void this.kick();
    }
  }

  /** One round of every shard's other work, side by side; their scans run one at a time. */
  private async tick(): Promise<void> {
    if (this.subProblem !== undefined && this.sub.status === 'ready') void this.subscribe();
    if (this.main.status !== 'ready' || this.mismatch !== undefined) return;
    if (this.scripts !== 'tried') await this.loadScripts();
    await Promise.all(this.shards.map((s) => s.tick()));
  }

  /**
   * Caches every script on the server before the first round on a connection, and again when a shard's
   * term changes (a new master). Best effort: on failure the scripts still run, each falling back to EVAL
   * once (runScript), and the shard rounds report whatever is really wrong with the connection.
   */
  private loadScripts(): Promise<void> {
    if (this.scripts instanceof Promise) return this.scripts;
    const load: Promise<void> = loadScripts(this.main, Object.values(SCRIPTS))
      .catch((err: unknown) => this.log.debug({ err: errorText(err) }, 'presence scripts not preloaded; EVALSHA falls back to EVAL'))
      .finally(() => {
        // A reconnect meanwhile reset it: that connection still needs its own load.
        if (this.scripts === load) this.scripts = 'tried';
      });
    this.scripts = load;
    return load;
  }

  private setMismatch(stored: number, mine: number): void {
    if (this.mismatch === undefined) {
      this.mismatch = new SandgateError('presence_shards_mismatch', `--presence-shards is ${mine} here but ${stored} on a live gateway sharing this Redis and key prefix; every gateway must use the same`, {
        details: { shards: mine, stored },
      });
      this.log.error({ code: this.mismatch.code, shards: mine, stored }, this.mismatch.message);
      // Whatever was written meanwhile is re-asserted, fenced, once the counts agree.
      for (const s of this.shards) s.wentOffline();
    }
  }

  /**
   * Subscribes the shards' change streams; at most one attempt in flight, bounded by the command timeout (a
   * Cluster client routes SUBSCRIBE through its own subscriber connection, which may still be switching
   * nodes). Every tick retries while unsubscribed.
   */
  private subscribe(): Promise<void> {
    this.subscribing ??= (async () => {
      let timer: NodeJS.Timeout | undefined;
      try {
        await Promise.race([
          this.sub.subscribe(...this.byChannel.keys()),
          new Promise((_resolve, reject) => (timer = setTimeout(() => reject(new Error('SUBSCRIBE timed out')), this.commandTimeoutMs))),
        ]);
        this.subProblem = undefined;
        // Messages published while unsubscribed are gone: re-scan.
        for (const s of this.shards) s.wantReload();
        void this.kick();
      } catch (err) {
        this.setSubDown(err);
      } finally {
        clearTimeout(timer);
        this.subscribing = undefined;
      }
    })();
    return this.subscribing;
  }

  private setOffline(err: unknown): void {
    if (this.closed) return;
    const reason = `presence store redis unreachable: ${errorText(err)}`;
    if (this.problem === undefined) this.log.warn({ err: errorText(err) }, 'presence store cannot reach Redis; serving from the mirror');
    this.problem = reason;
    for (const s of this.shards) s.wentOffline();
  }

  private setOnline(): void {
    if (this.problem === undefined) return;
    this.problem = undefined;
    this.log.info('presence store reconnected to Redis');
  }

  private setSubDown(err: unknown): void {
    if (this.closed) return;
    this.subProblem = `presence store subscription down: ${errorText(err)}`;
  }

  private report(errors: unknown[], what: string): void {
    for (const err of errors) this.log.error({ err }, `presence ${what} listener failed`);
  }
}

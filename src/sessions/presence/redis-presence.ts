import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { ListenerSet } from './presence-listeners.js';
import { PresenceMirror } from './presence-mirror.js';
import type { LiveLease, PresenceListener, PresenceRecord, PresenceStore, SessionClaim } from './presence-store.js';
import { createRedisClient, describeRedisTarget, keepConnecting, topologyOf, type RedisClient, type RedisConnectionOptions, type RedisTarget } from '../../lib/redis-connection.js';
import { disconnect, errorText, runScript } from './redis-connection.js';
import { decodeLeases, decodeMessage, decodeRecord, encodeGatewayInfo, fieldOf, type PresenceMessage, type StoredRecord } from './redis-codec.js';
import { presenceKeys, scriptKeys, SCRIPTS, TERM_SPAN, type PresenceKeys } from './redis-scripts.js';

export interface RedisPresenceOptions {
  /** redis://… or rediss://… (for Sentinel and Cluster, see redisOptions). */
  readonly url: string;
  /** ioredis options; Sentinel: `sentinels` + `name`; Cluster: `cluster: [{host, port}]`. */
  readonly redisOptions?: RedisConnectionOptions;
  readonly gatewayId: string;
  /** Gateway lease lifetime; renewed every third of it. Default 10000. */
  readonly leaseTtlMs?: number;
  /** Full re-scan period (heals anything the change stream missed; collects dead records). Default 30000. */
  readonly rescanMs?: number;
  /** Key prefix, used as the hash tag of every key. Default 'sandgate'. */
  readonly keyPrefix?: string;
  /** Published with the lease so peers can reach this gateway (e.g. its relay address). */
  readonly gatewayInfo?: Readonly<Record<string, string>>;
  readonly log: Logger;
  /** Local clock (ms), for lease deadlines. Default Date.now. */
  readonly now?: () => number;
}

export const DEFAULT_LEASE_TTL_MS = 10_000;
export const DEFAULT_RESCAN_MS = 30_000;

/** Creates the Redis presence store; call start() to connect and load the mirror. */
export function createRedisPresence(opts: RedisPresenceOptions): RedisPresence {
  return new RedisPresence(opts);
}

type RenewReply = [number, number, number, number, unknown[], number];
type TermReply = [number, number, number];
type SnapshotReply = [number, number, unknown[], unknown[]];
type AssertReply = [number, number, string];

/**
 * Cluster-wide presence through Redis (docs/presence.md). Reads are served from a PresenceMirror fed by
 * a start-up scan, a pub/sub change stream and periodic re-scans, so get()/list() never touch Redis.
 * A background tick every TTL/3 renews this gateway's lease, reads the live leases and the change
 * counter, pushes queued writes and re-scans when the stream missed something. While Redis is
 * unreachable, local claims and releases still apply to the mirror, are queued, and degraded() says why.
 */
export class RedisPresence implements PresenceStore {
  readonly kind = 'redis' as const;
  readonly gatewayId: string;
  private readonly log: Logger;
  private readonly now: () => number;
  private readonly keys: PresenceKeys;
  private readonly keyList: string[];
  private readonly ttlMs: number;
  private readonly renewMs: number;
  private readonly rescanMs: number;
  private readonly incarnation = randomUUID();
  private readonly info: Readonly<Record<string, string>>;
  private infoJson: string;
  private readonly target: RedisTarget;
  private readonly main: RedisClient;
  private readonly sub: RedisClient;
  private readonly mirror: PresenceMirror;
  private readonly changes = new ListenerSet<[string, string, PresenceRecord | undefined]>();
  private readonly losses = new ListenerSet<[PresenceRecord]>();
  /** Per-sandbox queue, so a claim, a release and a re-assert of one sandbox never interleave. */
  private readonly chains = new Map<string, Promise<unknown>>();
  /** Local sessions Redis may not have (claimed offline, or after a reconnect or a lapsed lease). */
  private readonly dirty = new Set<string>();
  /** Releases made while Redis was unreachable: sandbox → session ids. */
  private readonly pendingReleases = new Map<string, Set<string>>();
  private problem: string | undefined;
  private subProblem: string | undefined = 'presence store subscription not started';
  private subscribing: Promise<void> | undefined;
  private readonly commandTimeoutMs: number;
  private lastVersion = -1;
  /** Messages held while a scan is in flight, replayed after it (those the scan already covers are skipped). */
  private buffered: PresenceMessage[] | undefined = [];
  private reloadWanted = true;
  private resync = true;
  private ticking: Promise<void> | undefined;
  private tickAgain = false;
  private tickTimer: NodeJS.Timeout | undefined;
  private rescanTimer: NodeJS.Timeout | undefined;
  private lapseTimer: NodeJS.Timeout | undefined;
  private closed = false;
  /** Local time of the last renewal reply: lease deadlines are only trusted while this is recent. */
  private lastRenewedAt = Number.NEGATIVE_INFINITY;
  /** This master's term as adopted on the current connection; undefined: adopt before claiming. */
  private term: number | undefined;
  private sealed = false;
  private replicas = 0;
  /** The term the mirror was last loaded in (-1: none yet); a new one means a failover or a restart. */
  private mirrorTerm = -1;
  /** The term this gateway has re-asserted its sessions in, announced with its lease. */
  private syncedTerm = -1;
  private adopting: Promise<boolean> | undefined;
  private sealTimer: NodeJS.Timeout | undefined;

  constructor(opts: RedisPresenceOptions) {
    this.gatewayId = opts.gatewayId;
    this.log = opts.log.child({ part: 'presence', gatewayId: opts.gatewayId });
    this.now = opts.now ?? Date.now;
    this.keys = presenceKeys(opts.keyPrefix ?? 'sandgate');
    this.keyList = scriptKeys(this.keys);
    this.ttlMs = opts.leaseTtlMs ?? DEFAULT_LEASE_TTL_MS;
    this.renewMs = Math.floor(this.ttlMs / 3);
    this.rescanMs = opts.rescanMs ?? DEFAULT_RESCAN_MS;
    // The config schema validates these for operators; this guards other callers against a busy loop.
    assert(opts.gatewayId !== '', 'gatewayId must not be empty');
    assert(Number.isInteger(this.ttlMs) && this.ttlMs >= 30, 'leaseTtlMs must be an integer of at least 30');
    assert(Number.isInteger(this.rescanMs) && this.rescanMs >= 10, 'rescanMs must be an integer of at least 10');
    this.info = opts.gatewayInfo ?? {};
    this.infoJson = encodeGatewayInfo(this.incarnation, this.info, this.syncedTerm);
    // A command must fail well inside one renewal period's slack, or a hung Redis would stall the tick;
    // capped so a claim during a Redis hang delays a session's acceptance by at most 2 s, once.
    this.commandTimeoutMs = Math.min(2000, Math.max(250, Math.floor(this.ttlMs / 2)));
    this.target = { url: opts.url, options: opts.redisOptions };
    this.main = createRedisClient(this.target, { name: `sandgate-presence:${opts.gatewayId}`, commandTimeoutMs: this.commandTimeoutMs });
    this.sub = createRedisClient(this.target, { name: `sandgate-presence-sub:${opts.gatewayId}`, commandTimeoutMs: this.commandTimeoutMs });
    this.mirror = new PresenceMirror(this.gatewayId, this.incarnation, {
      change: (namespace, name, record) => this.report(this.changes.emit(namespace, name, record), 'change'),
      lost: (record) => {
        this.log.warn({ namespace: record.namespace, name: record.name, sessionId: record.sessionId, epoch: record.epoch }, 'local session superseded by a newer claim');
        this.report(this.losses.emit(record), 'lost');
      },
      // A peer has re-asserted its sessions on the new master: its records there can be believed now.
      synced: () => {
        this.reloadWanted = true;
        void this.kick();
      },
    });
  }

  async start(): Promise<void> {
    this.log.info({ redis: describeRedisTarget(this.target) }, 'presence store connecting');
    this.main.on('ready', () => {
      // A new connection may be to a restarted or failed-over server: adopt its term, re-assert
      // everything and re-scan.
      this.term = undefined;
      this.resync = true;
      this.reloadWanted = true;
      void this.kick();
    });
    if (topologyOf(this.target) === 'cluster') {
      // The node map changed (a slot moved, a replica was promoted): the renewal checks the term at once.
      this.main.on('+node', () => void this.kick());
      this.main.on('-node', () => void this.kick());
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
    this.sub.on('message', (_channel: string, text: string) => this.onMessage(text));
    // A failed or slow first connect is not fatal: ioredis keeps retrying, the store serves local
    // sessions meanwhile and reports degraded, and the 'ready' handler loads the mirror when it connects.
    let waited: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled([this.main.connect(), this.sub.connect()]),
      new Promise((resolve) => (waited = setTimeout(resolve, Math.min(this.ttlMs, 5000)))),
    ]);
    clearTimeout(waited);
    if (this.main.status !== 'ready' && this.problem === undefined) this.setOffline(new Error(`not connected yet (${this.main.status})`));
    await this.kick();
    this.rescanTimer = setInterval(() => {
      this.reloadWanted = true;
      void this.kick();
    }, this.rescanMs);
    this.rescanTimer.unref();
  }

  async claim(namespace: string, name: string, session: SessionClaim): Promise<PresenceRecord> {
    const field = fieldOf(namespace, name);
    return this.serial(field, async () => {
      // Offline, the epoch is at least the current term's first, above every epoch of earlier terms.
      let epoch = Math.max(this.mirror.nextEpoch(field), Math.max(this.mirrorTerm, 0) * TERM_SPAN + 1);
      const { sessionId, instanceId, since } = session;
      if (this.writable()) {
        try {
          const claimed = (await this.ensureTerm()) ? await this.claimIn(this.term!, field, session, epoch) : undefined;
          if (claimed === undefined) this.dirty.add(field);
          else epoch = claimed;
        } catch (err) {
          this.setOffline(err);
          this.dirty.add(field);
        }
      } else {
        this.dirty.add(field);
      }
      const record: PresenceRecord = { namespace, name, gatewayId: this.gatewayId, sessionId, instanceId, epoch, since };
      // A newer claim from elsewhere may already be mirrored; onLost fires after the caller has the record.
      if (this.mirror.setLocal(record)) setImmediate(() => this.mirror.checkLost(field));
      return record;
    });
  }

  /** Runs the claim script in `term`; undefined (nothing written) when that is no longer the master's sealed term. */
  private async claimIn(term: number, field: string, session: SessionClaim, minEpoch: number): Promise<number | undefined> {
    const args = [this.keys.channel, field, this.gatewayId, this.incarnation, session.sessionId, session.instanceId, String(session.since), minEpoch, term];
    // The claim overwrites whatever Redis holds for the sandbox: queued work for it is moot.
    this.dirty.delete(field);
    const epoch = Number(await runScript(this.main, SCRIPTS.claim, this.keyList, args));
    if (epoch < 0) {
      if (this.term === term) this.term = undefined;
      void this.kick();
      return undefined;
    }
    this.pendingReleases.delete(field);
    return epoch;
  }

  /**
   * Removes this gateway's session for the sandbox if it is the current one here, and Redis's record if it
   * is still this session's (remove-if-current). Returns whether the session was current here.
   */
  async release(namespace: string, name: string, sessionId: string): Promise<boolean> {
    const field = fieldOf(namespace, name);
    return this.serial(field, async () => {
      if (this.mirror.deleteLocal(field, sessionId) === undefined) return false;
      this.dirty.delete(field);
      if (this.writable()) {
        try {
          await runScript(this.main, SCRIPTS.release, this.keyList, [this.keys.channel, field, this.gatewayId, sessionId]);
          return true;
        } catch (err) {
          this.setOffline(err);
        }
      }
      // The same release bookkeeping as MemoryPresence.release (`duplicates` pairs them): both implement
      // PresenceStore's "remove if current"; Redis adds only the write that may fail and be retried.
      let set = this.pendingReleases.get(field);
      if (set === undefined) this.pendingReleases.set(field, (set = new Set()));
      set.add(sessionId);
      return true;
    });
  }

  get(namespace: string, name: string): PresenceRecord | undefined {
    return this.mirror.get(fieldOf(namespace, name));
  }

  list(): Iterable<PresenceRecord> {
    return this.mirror.list();
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
    if (this.subProblem !== undefined && this.problem === undefined) out.push(`${this.subProblem} (connection ${this.sub.status})`);
    // Claims are recorded locally (and asserted later) until the new term has reached every replica.
    if (this.problem === undefined && this.term !== undefined && !this.sealed) out.push(`presence store waiting for term ${this.term} to reach the Redis replicas`);
    return out;
  }

  /** The attributes a live gateway published with its lease (e.g. its relay address), from the mirror. */
  gatewayInfo(gatewayId: string): Readonly<Record<string, string>> | undefined {
    return this.mirror.gatewayInfo(gatewayId);
  }

  gatewayLeases(): LiveLease[] {
    const now = this.now();
    return this.mirror.liveLeases().map((l) => ({ gatewayId: l.gatewayId, info: l.info, expiresInMs: Math.max(0, l.deadline - now) }));
  }

  async close(opts: { release: boolean }): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearTimeout(this.tickTimer);
    clearInterval(this.rescanTimer);
    clearTimeout(this.lapseTimer);
    clearTimeout(this.sealTimer);
    await Promise.allSettled([this.ticking, this.adopting, ...this.chains.values()]);
    if (opts.release && this.main.status === 'ready') {
      const args: (string | number)[] = [this.keys.channel, this.gatewayId, this.incarnation];
      for (const r of this.mirror.localRecords()) args.push(fieldOf(r.namespace, r.name), r.sessionId);
      try {
        const n = await runScript(this.main, SCRIPTS.leave, this.keyList, args);
        this.log.info({ released: n }, 'presence released: lease and sessions deleted');
      } catch (err) {
        this.log.warn({ err }, 'presence release on close failed; peers drop this gateway when its lease expires');
      }
    }
    disconnect(this.main);
    disconnect(this.sub);
  }

  private writable(): boolean {
    return !this.closed && this.problem === undefined && this.main.status === 'ready';
  }

  private serial<T>(field: string, fn: () => Promise<T>): Promise<T> {
    const run = (this.chains.get(field) ?? Promise.resolve()).then(fn, fn);
    const tail = run.catch(() => undefined);
    this.chains.set(field, tail);
    void tail.then(() => {
      if (this.chains.get(field) === tail) this.chains.delete(field);
    });
    return run;
  }

  /** Runs the background tick now (or once more right after the running one). */
  private kick(): Promise<void> {
    if (this.closed) return Promise.resolve();
    if (this.ticking !== undefined) {
      this.tickAgain = true;
      return this.ticking;
    }
    clearTimeout(this.tickTimer);
    this.ticking = (async () => {
      do {
        this.tickAgain = false;
        await this.tick();
      } while (this.tickAgain && !this.closed);
    })().finally(() => {
      this.ticking = undefined;
      if (this.closed) return;
      this.tickTimer = setTimeout(() => void this.kick(), this.renewMs);
      this.tickTimer.unref();
    });
    return this.ticking;
  }

  private async tick(): Promise<void> {
    if (this.subProblem !== undefined && this.sub.status === 'ready') void this.subscribe();
    if (this.main.status !== 'ready') return;
    try {
      await this.ensureTerm();
      const term = this.term;
      const args = [this.keys.channel, this.gatewayId, this.incarnation, this.ttlMs, this.infoJson, Math.max(10 * this.ttlMs, 60_000)];
      const [redisNow, lapsed, usurped, version, leases, storedTerm] = (await runScript(this.main, SCRIPTS.renew, this.keyList, args)) as RenewReply;
      this.lastRenewedAt = this.now();
      if (storedTerm !== term) {
        // The stored term is not this master's: a failover behind the same connection (a Cluster replica
        // promoted, a slot moved to a new node). Adopt the new term first; the next round does the rest.
        this.log.warn({ term, storedTerm }, 'presence term changed under this connection; adopting the new one');
        if (this.term === term) this.term = undefined;
        this.tickAgain = true;
        return;
      }
      if (usurped === 1) this.log.error('another live process holds this gateway id; gateway ids must be unique');
      this.mirror.replaceLeases(decodeLeases(leases, redisNow, this.now()));
      if (lapsed === 1 || this.resync) {
        if (lapsed === 1 && !this.resync) this.log.warn('gateway lease had lapsed; re-asserting local sessions');
        for (const r of this.mirror.localRecords()) this.dirty.add(fieldOf(r.namespace, r.name));
        this.resync = false;
      }
      this.checkVersion(version);
      await this.flush();
      if (this.reloadWanted) {
        // Cleared first: a gap seen while replaying held messages asks for another scan.
        this.reloadWanted = false;
        await this.reload();
        await this.collect();
      }
      this.setOnline();
      this.scheduleLapse();
      // Everything this gateway holds is asserted on this master and its own orphans collected: announce
      // it with the lease, so peers that kept this gateway's pre-failover records start reading Redis's.
      if (term !== undefined && this.syncedTerm !== term && this.term === term && !this.resync && !this.reloadWanted && this.dirty.size === 0) {
        this.syncedTerm = term;
        this.infoJson = encodeGatewayInfo(this.incarnation, this.info, term);
        this.tickAgain = true;
      }
    } catch (err) {
      this.setOffline(err);
    }
  }

  /**
   * Adopts the master's term (once per connection, or when a script reports it changed) and seals it.
   * Resolves whether claims may run: true once the term is sealed (every replica has it).
   */
  private ensureTerm(): Promise<boolean> {
    if (this.term !== undefined && this.sealed) return Promise.resolve(true);
    this.adopting ??= this.adoptTerm().finally(() => (this.adopting = undefined));
    return this.adopting;
  }

  private async adoptTerm(): Promise<boolean> {
    if (this.term === undefined) {
      const [term, sealed, replicas] = (await runScript(this.main, SCRIPTS.term, this.keyList, [this.keys.channel, Math.max(this.mirrorTerm, this.syncedTerm) + 1])) as TermReply;
      this.term = term;
      this.sealed = sealed === 1;
      this.replicas = replicas;
      if (term !== this.mirrorTerm) {
        if (this.mirrorTerm >= 0) this.log.warn({ from: this.mirrorTerm, to: term }, 'presence term changed (Redis failed over or restarted): re-asserting sessions and reloading');
        // The change counter of the new master may be behind the old one (lost increments): it starts over.
        this.mirror.setTerm(term, this.mirrorTerm >= 0 ? this.now() + this.ttlMs : undefined);
        this.mirrorTerm = term;
        this.lastVersion = -1;
        this.resync = true;
        this.reloadWanted = true;
      }
    }
    if (this.sealed) return true;
    const term = this.term;
    let sealed = Number(await runScript(this.main, SCRIPTS.seal, this.keyList, [this.keys.channel, term]));
    if (sealed === 0 && this.replicas > 0 && topologyOf(this.target) !== 'cluster') {
      // WAIT asks the replicas to acknowledge now instead of at their next once-a-second report. On
      // Cluster a keyless command would reach a random node, so the seal is polled instead.
      await this.main.call('WAIT', this.replicas, Math.floor(this.commandTimeoutMs / 2));
      sealed = Number(await runScript(this.main, SCRIPTS.seal, this.keyList, [this.keys.channel, term]));
    }
    if (this.term !== term) return false;
    if (sealed < 0) {
      this.term = undefined;
      return false;
    }
    this.sealed = sealed === 1;
    if (!this.sealed) {
      clearTimeout(this.sealTimer);
      this.sealTimer = setTimeout(() => void this.kick(), 200);
      this.sealTimer.unref();
    }
    return this.sealed;
  }

  /** A counter Redis bumps with every published change: one the mirror has not seen means a missed message. */
  private checkVersion(version: number): void {
    if (version === this.lastVersion) return;
    if (version < this.lastVersion || this.lastVersion < 0) {
      this.reloadWanted = true;
      return;
    }
    // The message may still be in flight on the subscriber connection: give it a moment before scanning.
    setTimeout(() => {
      if (this.lastVersion >= version) return;
      this.reloadWanted = true;
      void this.kick();
    }, Math.min(this.renewMs, 250)).unref();
  }

  /** Pushes queued releases, then re-asserts dirty local sessions (fenced: a newer claim wins). */
  private async flush(): Promise<void> {
    await Promise.all(
      [...this.pendingReleases.keys()].map((field) =>
        this.serial(field, async () => {
          const set = this.pendingReleases.get(field);
          for (const sessionId of [...(set ?? [])]) {
            await runScript(this.main, SCRIPTS.release, this.keyList, [this.keys.channel, field, this.gatewayId, sessionId]);
            set?.delete(sessionId);
          }
          if (set?.size === 0) this.pendingReleases.delete(field);
        }),
      ),
    );
    await Promise.all([...this.dirty].map((field) => this.serial(field, () => this.assertLocal(field))));
  }

  private async assertLocal(field: string): Promise<void> {
    const l = this.mirror.localRecord(field);
    if (l === undefined) {
      this.dirty.delete(field);
      return;
    }
    const args = [this.keys.channel, field, this.gatewayId, this.incarnation, l.sessionId, l.instanceId, String(l.since), l.epoch];
    // Cleared before the write, so a reconnect that marks it again meanwhile is not forgotten.
    this.dirty.delete(field);
    let reply: AssertReply;
    try {
      reply = (await runScript(this.main, SCRIPTS.assert, this.keyList, args)) as AssertReply;
    } catch (err) {
      this.dirty.add(field);
      throw err;
    }
    const [ok, epoch, raw] = reply;
    if (this.mirror.localRecord(field) !== l) return;
    if (ok === 1) {
      if (epoch !== l.epoch) this.mirror.setLocal({ ...l, epoch });
      this.mirror.checkLost(field);
      return;
    }
    this.log.info({ namespace: l.namespace, name: l.name, epoch: l.epoch, storedEpoch: epoch }, 're-assert lost to a newer claim');
    if (raw !== '') this.mirror.putRemote(field, decodeRecord(field, raw));
    this.mirror.loseLocal(field, l.sessionId);
  }

  /** Loads every record and live lease in one consistent read, then replays messages that arrived meanwhile. */
  private async reload(): Promise<void> {
    this.buffered ??= [];
    try {
      const [redisNow, version, flat, leases] = (await runScript(this.main, SCRIPTS.snapshot, this.keyList, [this.keys.channel])) as SnapshotReply;
      const records = new Map<string, StoredRecord>();
      for (let j = 0; j + 1 < flat.length; j += 2) {
        const field = String(flat[j]);
        const stored = decodeRecord(field, flat[j + 1]);
        if (stored === undefined) this.log.warn({ field }, 'skipping malformed presence record');
        else records.set(field, stored);
      }
      this.mirror.replaceLeases(decodeLeases(leases, redisNow, this.now()));
      this.mirror.replaceRemote(records);
      this.lastVersion = version;
    } finally {
      const held = this.buffered ?? [];
      this.buffered = undefined;
      for (const m of held) this.apply(m);
      this.scheduleLapse();
    }
  }

  /** Deletes records no live lease backs (fenced per record; the script re-checks the lease). */
  private async collect(): Promise<void> {
    const stale = this.mirror.staleRecords().filter((s) => !this.chains.has(s.field) && !this.pendingReleases.has(s.field));
    for (let j = 0; j < stale.length; j += 500) {
      const args: (string | number)[] = [this.keys.channel, this.gatewayId];
      for (const s of stale.slice(j, j + 500)) args.push(s.field, s.sessionId, s.epoch);
      const n = await runScript(this.main, SCRIPTS.collect, this.keyList, args);
      if (Number(n) > 0) this.log.debug({ collected: n }, 'collected presence records of lapsed gateways');
    }
  }

  /**
   * Subscribes the change stream; at most one attempt in flight, bounded by the command timeout (a Cluster
   * client routes SUBSCRIBE through its own subscriber connection, which may still be switching nodes).
   * Every tick retries while unsubscribed.
   */
  private subscribe(): Promise<void> {
    this.subscribing ??= (async () => {
      let timer: NodeJS.Timeout | undefined;
      try {
        await Promise.race([
          this.sub.subscribe(this.keys.channel),
          new Promise((_resolve, reject) => (timer = setTimeout(() => reject(new Error('SUBSCRIBE timed out')), this.commandTimeoutMs))),
        ]);
        this.subProblem = undefined;
        // Messages published while unsubscribed are gone: re-scan.
        this.reloadWanted = true;
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

  private onMessage(text: string): void {
    const m = decodeMessage(text);
    if (m === undefined) {
      this.log.warn({ message: text.slice(0, 200) }, 'ignoring malformed presence message');
      return;
    }
    if (this.buffered !== undefined) this.buffered.push(m);
    else this.apply(m);
  }

  private apply(m: PresenceMessage): void {
    if (m.v <= this.lastVersion) return;
    if (this.lastVersion >= 0 && m.v !== this.lastVersion + 1) {
      this.reloadWanted = true;
      void this.kick();
    }
    this.lastVersion = m.v;
    switch (m.op) {
      case 'set':
        this.mirror.putRemote(m.field, m.stored);
        break;
      case 'del':
        this.mirror.putRemote(m.field, undefined);
        break;
      case 'del-many':
        for (const f of m.fields) this.mirror.putRemote(f, undefined);
        break;
      case 'gw':
        this.mirror.putLease({ ...m.lease, deadline: this.now() + (m.expiry - m.redisNow) });
        this.scheduleLapse();
        break;
      case 'gw-down':
        for (const f of m.fields) this.mirror.putRemote(f, undefined);
        if (this.mirror.leaseIncarnation(m.gatewayId) === m.incarnation) this.mirror.dropLease(m.gatewayId);
        break;
    }
  }

  /**
   * Expires peer leases on the local clock, so a crashed gateway's sessions vanish one TTL after its last
   * renewal rather than at this gateway's next read. A deadline is only as good as the read it came
   * from: when this gateway's own renewals are late or failing (Redis hung, or this process was paused),
   * a peer may well have renewed unseen, so expiry waits for the next successful read, and while Redis
   * is unreachable the mirror keeps serving the last known cluster state.
   */
  private scheduleLapse(): void {
    clearTimeout(this.lapseTimer);
    const now = this.now();
    if (this.closed || this.problem !== undefined || now - this.lastRenewedAt > 2 * this.renewMs) return;
    const next = this.mirror.expireLeases(now);
    if (next === undefined) return;
    this.lapseTimer = setTimeout(() => this.scheduleLapse(), Math.max(1, next - this.now()));
    this.lapseTimer.unref();
  }

  private setOffline(err: unknown): void {
    if (this.closed) return;
    const reason = `presence store redis unreachable: ${errorText(err)}`;
    if (this.problem === undefined) this.log.warn({ err: errorText(err) }, 'presence store cannot reach Redis; serving from the mirror');
    this.problem = reason;
    this.reloadWanted = true;
    // A renewal whose reply was lost may have run late and found the lease lapsed (and the records
    // collected) without this gateway hearing it: re-assert everything once Redis answers again.
    this.resync = true;
    clearTimeout(this.lapseTimer);
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

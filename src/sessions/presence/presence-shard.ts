import type { Logger } from 'pino';
import type { RedisClient } from '../../lib/redis-connection.js';
import { PresenceMirror, type MirrorEvents } from './presence-mirror.js';
import type { PresenceRecord, SessionClaim } from './presence-store.js';
import { errorText, runScript } from './redis-script-runner.js';
import { decodeLeases, decodeMessage, decodeRecord, encodeGatewayInfo, fieldOf, type PresenceMessage, type StoredRecord } from './redis-codec.js';
import { presenceKeys, scriptKeys, SCRIPTS, TERM_SPAN, type PresenceKeys } from './redis-scripts.js';

/** What a shard needs from the store that owns the connections (RedisPresence). */
export interface ShardHost {
  readonly gatewayId: string;
  readonly incarnation: string;
  readonly info: Readonly<Record<string, string>>;
  readonly log: Logger;
  readonly now: () => number;
  readonly ttlMs: number;
  readonly renewMs: number;
  readonly commandTimeoutMs: number;
  readonly shards: number;
  /** Whether the client is a Cluster client (no keyless WAIT: it would reach a random node). */
  readonly cluster: boolean;
  readonly main: RedisClient;
  /** The connection is up, not closed, and the shard count agrees with the live peers'. */
  writable(): boolean;
  /** The connection is down or closed: peer lease deadlines cannot be trusted. */
  offline(): boolean;
  /** A shard's script succeeded: the connection works. */
  setOnline(): void;
  /** Runs a round of the shards' work (everything but renewals) now, or right after the running one. */
  kick(): void;
  /** Runs a renewal round now, or right after the running one. */
  renewNow(): void;
  /** Caches the scripts on the server(s) before a burst of them (at most one load in flight). */
  loadScripts(): Promise<void>;
  /** Runs `fn` after every other shard's scan, so one gateway never scans two shards at once. */
  oneScanAtATime<T>(fn: () => Promise<T>): Promise<T>;
  /** Runs `fn` after every earlier operation on the sandbox. */
  serial<T>(field: string, fn: () => Promise<T>): Promise<T>;
  /** Whether an operation on the sandbox is queued or running. */
  busy(field: string): boolean;
  /** A live gateway's lease names a different shard count (the renew script refused to write). */
  layoutMismatch(stored: number): void;
}

/** What a shard's renewal found ('failed': the command failed, see PresenceShard.problem). */
export type ShardRenewal = 'done' | 'mismatch' | 'failed';

type RenewReply = [number, number, number, number, unknown[], number, number];
type TermReply = [number, number, number];
type SnapshotReply = [number, number, unknown[], unknown[]];
type AssertReply = [number, number, string];

/**
 * One shard of the Redis presence store (docs/presence.md, "Shards"): its keys (one hash tag, so one
 * Cluster slot), its mirror, and everything that is per shard because a shard may live on its own master:
 * the term (bound to that master's replication id), the change counter, the lease this gateway holds in
 * it, the sessions to re-assert and releases to push, and the scan. Claims, releases and re-asserts run
 * one script within the shard, so the lease check and the epoch fence stay atomic per shard.
 */
export class PresenceShard {
  readonly keys: PresenceKeys;
  readonly mirror: PresenceMirror;
  private readonly keyList: string[];
  /** Local sessions Redis may not have (claimed offline, or after a reconnect or a lapsed lease). */
  private readonly dirty = new Set<string>();
  /** Releases made while Redis was unreachable: sandbox → session ids. */
  private readonly pendingReleases = new Map<string, Set<string>>();
  private infoJson: string;
  private lastVersion = -1;
  /** Messages held while a scan is in flight, replayed after it (those the scan already covers are skipped). */
  private buffered: PresenceMessage[] | undefined = [];
  private reloadWanted = true;
  private resync = true;
  /** Local time of the last renewal reply: lease deadlines are only trusted while this is recent. */
  private lastRenewedAt = Number.NEGATIVE_INFINITY;
  /** A renewal succeeded since the last failed command: the master answers (see work()). */
  private renewedSinceFailure = false;
  private renewal: Promise<ShardRenewal> | undefined;
  /** This shard master's term as adopted on the current connection; undefined: adopt before claiming. */
  private term: number | undefined;
  private sealed = false;
  private replicas = 0;
  /** The term the mirror was last loaded in (-1: none yet); a new one means a failover or a restart. */
  private mirrorTerm = -1;
  /** The term this gateway has re-asserted its sessions in, announced with its lease in this shard. */
  private syncedTerm = -1;
  private adopting: Promise<boolean> | undefined;
  private sealTimer: NodeJS.Timeout | undefined;
  private lapseTimer: NodeJS.Timeout | undefined;
  /**
   * Why this shard's last command failed (its master is down, failing over, or hung), until one succeeds.
   * Per shard: on Cluster a shard's master can fail while the others' serve on.
   */
  problem: string | undefined;

  constructor(
    readonly index: number,
    prefix: string,
    private readonly host: ShardHost,
    events: Omit<MirrorEvents, 'synced'>,
  ) {
    this.keys = presenceKeys(prefix, index);
    this.keyList = scriptKeys(this.keys);
    this.infoJson = encodeGatewayInfo(host.incarnation, host.info, this.syncedTerm, host.shards);
    this.mirror = new PresenceMirror(host.gatewayId, host.incarnation, {
      ...events,
      // A peer has re-asserted its sessions in this shard on its new master: its records there can be believed now.
      synced: () => {
        this.reloadWanted = true;
        host.kick();
      },
    });
  }

  /** The shard's term on its master, or undefined before adoption (for tests and logs). */
  currentTerm(): number | undefined {
    return this.term;
  }

  async claim(field: string, namespace: string, name: string, session: SessionClaim): Promise<PresenceRecord> {
    // Offline, the epoch is at least the current term's first, above every epoch of earlier terms.
    let epoch = Math.max(this.mirror.nextEpoch(field), Math.max(this.mirrorTerm, 0) * TERM_SPAN + 1);
    const { sessionId, instanceId, since } = session;
    if (this.writable()) {
      try {
        const claimed = (await this.ensureTerm()) ? await this.claimIn(this.term!, field, session, epoch) : undefined;
        if (claimed === undefined) this.dirty.add(field);
        else epoch = claimed;
      } catch (err) {
        this.fail(err);
        this.dirty.add(field);
      }
    } else {
      this.dirty.add(field);
    }
    const record: PresenceRecord = { namespace, name, gatewayId: this.host.gatewayId, sessionId, instanceId, epoch, since };
    // A newer claim from elsewhere may already be mirrored; onLost fires after the caller has the record.
    if (this.mirror.setLocal(record)) setImmediate(() => this.mirror.checkLost(field));
    return record;
  }

  /**
   * A script found that `term` is not the master's any more (a failover behind the same connection that
   * the renewal has not reported yet): adopt the new term first, then scan again.
   */
  private termMoved(term: number): void {
    if (this.term === term) this.term = undefined;
    this.reloadWanted = true;
    this.host.kick();
  }

  /** Runs the claim script in `term`; undefined (nothing written) when that is no longer the master's sealed term. */
  private async claimIn(term: number, field: string, session: SessionClaim, minEpoch: number): Promise<number | undefined> {
    const args = [this.keys.channel, field, this.host.gatewayId, this.host.incarnation, session.sessionId, session.instanceId, String(session.since), minEpoch, term];
    // The claim overwrites whatever Redis holds for the sandbox: queued work for it is moot.
    this.dirty.delete(field);
    const epoch = Number(await runScript(this.host.main, SCRIPTS.claim, this.keyList, args));
    if (epoch < 0) {
      if (this.term === term) this.term = undefined;
      this.host.kick();
      return undefined;
    }
    this.pendingReleases.delete(field);
    return epoch;
  }

  /** See RedisPresence.release. */
  async release(field: string, sessionId: string): Promise<boolean> {
    if (this.mirror.deleteLocal(field, sessionId) === undefined) return false;
    this.dirty.delete(field);
    if (this.writable()) {
      try {
        await runScript(this.host.main, SCRIPTS.release, this.keyList, [this.keys.channel, field, this.host.gatewayId, sessionId]);
        return true;
      } catch (err) {
        this.fail(err);
      }
    }
    // The same release bookkeeping as MemoryPresence.release: both implement
    // PresenceStore's "remove if current"; Redis adds only the write that may fail and be retried.
    let set = this.pendingReleases.get(field);
    if (set === undefined) this.pendingReleases.set(field, (set = new Set()));
    set.add(sessionId);
    return true;
  }

  /** The connection (re)opened, possibly to a restarted or failed-over server: adopt its term, re-assert everything and re-scan. */
  reconnected(): void {
    this.term = undefined;
    this.resync = true;
    this.reloadWanted = true;
  }

  private writable(): boolean {
    return this.problem === undefined && this.host.writable();
  }

  /** A command in this shard failed: serve from the mirror, queue writes, until a round succeeds. */
  fail(err: unknown): void {
    const text = errorText(err);
    if (this.problem === undefined) this.host.log.warn({ shard: this.index, err: text }, 'presence store cannot reach the Redis master of this shard; serving from the mirror');
    this.problem = this.host.shards === 1 ? text : `shard ${this.index}: ${text}`;
    this.renewedSinceFailure = false;
    this.wentOffline();
  }

  /** Redis failed a command: re-scan and re-assert once it answers (a lost renewal reply may hide a lapse). */
  wentOffline(): void {
    this.reloadWanted = true;
    this.resync = true;
    clearTimeout(this.lapseTimer);
  }

  /** The periodic full re-scan. */
  wantReload(): void {
    this.reloadWanted = true;
  }

  /** Why this shard cannot take claims yet, if it cannot. */
  waiting(): string | undefined {
    // Claims are recorded locally (and asserted later) until the new term has reached every replica.
    if (this.term !== undefined && !this.sealed) return `presence store waiting for term ${this.term}${this.host.shards === 1 ? '' : ` of shard ${this.index}`} to reach the Redis replicas`;
    return undefined;
  }

  /** Resolves once no term adoption or renewal is in flight. */
  async settled(): Promise<void> {
    await Promise.allSettled([this.adopting, this.renewal]);
  }

  stop(): void {
    clearTimeout(this.sealTimer);
    clearTimeout(this.lapseTimer);
  }

  /** Graceful shutdown in this shard: drops the lease and this gateway's records (one script). */
  async leave(): Promise<number> {
    const args: (string | number)[] = [this.keys.channel, this.host.gatewayId, this.host.incarnation];
    for (const r of this.mirror.localRecords()) args.push(fieldOf(r.namespace, r.name), r.sessionId);
    return Number(await runScript(this.host.main, SCRIPTS.leave, this.keyList, args));
  }

  /**
   * Renews this gateway's lease in the shard and reads every live lease, the change counter and the stored
   * term (one script). Runs on the renewal timer, apart from the rest of the shard's work (tick()), so a
   * scan, a burst of re-asserts or another shard's hung master never delays it; at most one is in flight.
   */
  renew(): Promise<ShardRenewal> {
    this.renewal ??= this.renewOnce().finally(() => (this.renewal = undefined));
    return this.renewal;
  }

  private async renewOnce(): Promise<ShardRenewal> {
    const { host } = this;
    const args = [this.keys.channel, host.gatewayId, host.incarnation, host.ttlMs, this.infoJson, Math.max(10 * host.ttlMs, 60_000), host.shards];
    let reply: RenewReply;
    try {
      reply = (await runScript(host.main, SCRIPTS.renew, this.keyList, args)) as RenewReply;
    } catch (err) {
      this.fail(err);
      return 'failed';
    }
    const [redisNow, lapsed, usurped, version, leases, layout, storedTerm] = reply;
    if (layout !== host.shards) {
      host.layoutMismatch(layout);
      return 'mismatch';
    }
    this.renewedSinceFailure = true;
    host.setOnline();
    // Every shard holds a copy of the lease: one log line per renewal is enough.
    if (usurped === 1 && this.index === 0) host.log.error('another live process holds this gateway id; gateway ids must be unique');
    if (lapsed === 1) {
      if (!this.resync) host.log.warn({ shard: this.index }, 'gateway lease had lapsed; re-asserting local sessions');
      this.resync = true;
    }
    if (this.term === undefined || storedTerm !== this.term) {
      // No term adopted on this connection yet, or the stored term is not this master's: a failover behind
      // the same connection (a Cluster replica promoted, a slot moved to a new node). The leases and the
      // counter read here belong to a term the mirror has not adopted (adopting grants peers a grace to
      // reach the new master): the work round adopts it first, the next renewal reads them.
      if (this.term !== undefined) host.log.warn({ shard: this.index, term: this.term, storedTerm }, 'presence term changed under this connection; adopting the new one');
      this.term = undefined;
      host.kick();
      return 'done';
    }
    this.lastRenewedAt = host.now();
    this.mirror.replaceLeases(decodeLeases(leases, redisNow, host.now()));
    this.checkVersion(version);
    this.scheduleLapse();
    if (this.resync || this.reloadWanted || this.problem !== undefined) host.kick();
    return 'done';
  }

  /**
   * One round of the shard's other background work: adopt the term, push queued writes, re-scan when
   * something was missed, collect records no lease backs, announce the synced term. A failed command ends
   * the round and leaves the other shards' rounds and every renewal alone. Nothing is written while the
   * store may not write (a shard-count mismatch stands, the connection is down, the store is closed).
   */
  async tick(): Promise<void> {
    try {
      await this.work();
    } catch (err) {
      this.fail(err);
    }
  }

  private async work(): Promise<void> {
    const { host } = this;
    if (!host.writable()) return;
    await this.ensureTerm();
    const term = this.term;
    if (this.resync) {
      for (const r of this.mirror.localRecords()) this.dirty.add(fieldOf(r.namespace, r.name));
      this.resync = false;
    }
    await this.flush();
    if (this.reloadWanted && term !== undefined) {
      // Cleared first: a gap seen while replaying held messages asks for another scan.
      this.reloadWanted = false;
      if ((await this.reload(term)) && host.writable()) await this.collect(term);
    }
    // The shard is reachable again once a renewal has succeeded since the failure and the work is done
    // (a round with nothing to do sends no command, so it alone proves nothing).
    if (this.problem !== undefined && this.renewedSinceFailure) {
      this.problem = undefined;
      host.log.info({ shard: this.index }, 'presence shard reachable again');
    }
    this.scheduleLapse();
    // Everything this gateway holds in the shard is asserted on its master and its own orphans collected:
    // announce it with the lease, so peers that kept this gateway's pre-failover records start reading Redis's.
    if (term !== undefined && this.syncedTerm !== term && this.term === term && !this.resync && !this.reloadWanted && this.dirty.size === 0) {
      this.syncedTerm = term;
      this.infoJson = encodeGatewayInfo(host.incarnation, host.info, term, host.shards);
      host.renewNow();
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
    const { host } = this;
    if (this.term === undefined) {
      const [term, sealed, replicas] = (await runScript(host.main, SCRIPTS.term, this.keyList, [this.keys.channel, Math.max(this.mirrorTerm, this.syncedTerm) + 1])) as TermReply;
      this.term = term;
      this.sealed = sealed === 1;
      this.replicas = replicas;
      if (term !== this.mirrorTerm) {
        if (this.mirrorTerm >= 0) {
          host.log.warn({ shard: this.index, from: this.mirrorTerm, to: term }, 'presence term changed (Redis failed over or restarted): re-asserting sessions and reloading');
          // A new master has an empty script cache: fill it before this shard's re-assert burst. Elsewhere a
          // new master is always a new connection, whose 'ready' already loaded them; on Cluster a
          // promoted replica can appear behind the same client.
          if (host.cluster) await host.loadScripts();
        }
        // The change counter of the new master may be behind the old one (lost increments): it starts over.
        this.mirror.setTerm(term, this.mirrorTerm >= 0 ? host.now() + host.ttlMs : undefined);
        this.mirrorTerm = term;
        this.lastVersion = -1;
        this.resync = true;
        this.reloadWanted = true;
      }
    }
    if (this.sealed) return true;
    const term = this.term;
    let sealed = Number(await runScript(host.main, SCRIPTS.seal, this.keyList, [this.keys.channel, term]));
    if (sealed === 0 && this.replicas > 0 && !host.cluster) {
      // WAIT asks the replicas to acknowledge now instead of at their next once-a-second report. On
      // Cluster a keyless command would reach a random node, so the seal is polled instead.
      await host.main.call('WAIT', this.replicas, Math.floor(host.commandTimeoutMs / 2));
      sealed = Number(await runScript(host.main, SCRIPTS.seal, this.keyList, [this.keys.channel, term]));
    }
    if (this.term !== term) return false;
    if (sealed < 0) {
      this.term = undefined;
      return false;
    }
    this.sealed = sealed === 1;
    if (!this.sealed) {
      clearTimeout(this.sealTimer);
      this.sealTimer = setTimeout(() => host.kick(), 200);
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
    setTimeout(
      () => {
        if (this.lastVersion >= version) return;
        this.reloadWanted = true;
        this.host.kick();
      },
      Math.min(this.host.renewMs, 250),
    ).unref();
  }

  /** Pushes queued releases, then re-asserts dirty local sessions (fenced: a newer claim wins). */
  private async flush(): Promise<void> {
    const { host } = this;
    await Promise.all(
      [...this.pendingReleases.keys()].map((field) =>
        host.serial(field, async () => {
          const set = this.pendingReleases.get(field);
          for (const sessionId of [...(set ?? [])]) {
            await runScript(host.main, SCRIPTS.release, this.keyList, [this.keys.channel, field, host.gatewayId, sessionId]);
            set?.delete(sessionId);
          }
          if (set?.size === 0) this.pendingReleases.delete(field);
        }),
      ),
    );
    await Promise.all([...this.dirty].map((field) => host.serial(field, () => this.assertLocal(field))));
  }

  private async assertLocal(field: string): Promise<void> {
    const l = this.mirror.localRecord(field);
    if (l === undefined) {
      this.dirty.delete(field);
      return;
    }
    const args = [this.keys.channel, field, this.host.gatewayId, this.host.incarnation, l.sessionId, l.instanceId, String(l.since), l.epoch];
    // Cleared before the write, so a reconnect that marks it again meanwhile is not forgotten.
    this.dirty.delete(field);
    let reply: AssertReply;
    try {
      reply = (await runScript(this.host.main, SCRIPTS.assert, this.keyList, args)) as AssertReply;
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
    this.host.log.info({ namespace: l.namespace, name: l.name, epoch: l.epoch, storedEpoch: epoch }, 're-assert lost to a newer claim');
    if (raw !== '') this.mirror.putRemote(field, decodeRecord(field, raw));
    this.mirror.loseLocal(field, l.sessionId);
  }

  /**
   * Loads every record and live lease of the shard in one consistent read, then replays messages that
   * arrived meanwhile. Returns false, changing nothing, when `term` is no longer the master's.
   */
  private async reload(term: number): Promise<boolean> {
    this.buffered ??= [];
    try {
      const reply = (await this.host.oneScanAtATime(() => runScript(this.host.main, SCRIPTS.snapshot, this.keyList, [this.keys.channel, term]))) as SnapshotReply | -1;
      if (reply === -1) {
        this.termMoved(term);
        return false;
      }
      const [redisNow, version, flat, leases] = reply;
      const records = new Map<string, StoredRecord>();
      for (let j = 0; j + 1 < flat.length; j += 2) {
        const field = String(flat[j]);
        const stored = decodeRecord(field, flat[j + 1]);
        if (stored === undefined) this.host.log.warn({ shard: this.index, field }, 'skipping malformed presence record');
        else records.set(field, stored);
      }
      this.mirror.replaceLeases(decodeLeases(leases, redisNow, this.host.now()));
      this.mirror.replaceRemote(records);
      this.lastVersion = version;
      return true;
    } finally {
      const held = this.buffered ?? [];
      this.buffered = undefined;
      for (const m of held) this.apply(m);
      this.scheduleLapse();
    }
  }

  /** Deletes records no live lease backs (fenced per record and by `term`; the script re-checks the lease). */
  private async collect(term: number): Promise<void> {
    const stale = this.mirror.staleRecords().filter((s) => !this.host.busy(s.field) && !this.pendingReleases.has(s.field));
    for (let j = 0; j < stale.length; j += 500) {
      const args: (string | number)[] = [this.keys.channel, this.host.gatewayId, term];
      for (const s of stale.slice(j, j + 500)) args.push(s.field, s.sessionId, s.epoch);
      const n = Number(await runScript(this.host.main, SCRIPTS.collect, this.keyList, args));
      if (n < 0) {
        this.termMoved(term);
        return;
      }
      if (n > 0) this.host.log.debug({ shard: this.index, collected: n }, 'collected presence records of lapsed gateways');
    }
  }

  /** A message on this shard's channel. */
  onMessage(text: string): void {
    const m = decodeMessage(text);
    if (m === undefined) {
      this.host.log.warn({ shard: this.index, message: text.slice(0, 200) }, 'ignoring malformed presence message');
      return;
    }
    if (this.buffered !== undefined) this.buffered.push(m);
    else this.apply(m);
  }

  private apply(m: PresenceMessage): void {
    if (m.v <= this.lastVersion) return;
    if (this.lastVersion >= 0 && m.v !== this.lastVersion + 1) {
      this.reloadWanted = true;
      this.host.kick();
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
        this.mirror.putLease({ ...m.lease, deadline: this.host.now() + (m.expiry - m.redisNow) });
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
  scheduleLapse(): void {
    clearTimeout(this.lapseTimer);
    const now = this.host.now();
    if (this.host.offline() || this.problem !== undefined || now - this.lastRenewedAt > 2 * this.host.renewMs) return;
    const next = this.mirror.expireLeases(now);
    if (next === undefined) return;
    this.lapseTimer = setTimeout(() => this.scheduleLapse(), Math.max(1, next - this.host.now()));
    this.lapseTimer.unref();
  }
}

import type { PresenceRecord } from './presence-store.js';
import { fieldOf, type GatewayLease, type StoredRecord } from './redis-codec.js';

/**
 * The in-memory mirror behind the Redis presence store: plain data and synchronous methods, no I/O and no
 * clock reads (times are passed in), so every rule below is testable without Redis.
 *
 * It holds three things and derives a fourth:
 * - `remote`: the records as Redis last showed them (at most one per sandbox, like the Redis hash);
 * - `leases`: the live gateway leases, with deadlines on the local clock;
 * - `local`: this gateway's own sessions, which are authoritative for this gateway;
 * - `visible`: what get()/list() answer. A sandbox's visible presence is the local session if there is
 *   one, else the remote record if its gateway's lease is live under the incarnation that wrote it.
 *   Records this gateway wrote are never taken from Redis: the local map already says what is live here.
 *
 * A local session is lost (superseded) when Redis shows another writer's record for the sandbox with a
 * higher epoch, or the same epoch under another session (the first writer won the fenced write).
 *
 * After a failover (a new term) the new master may be behind: a release or a claim the old master took may
 * be missing. Until a peer announces (in its lease) that it has re-asserted its sessions in the current
 * term, a full scan does not replace what the mirror holds for that peer's records: the mirror keeps the
 * pre-failover picture of them (which the change stream kept current) rather than a possibly older one.
 */

export interface MirrorEvents {
  change(namespace: string, name: string, record: PresenceRecord | undefined): void;
  lost(record: PresenceRecord): void;
  /** A peer announced it has re-asserted its sessions in the current term: reload to read its records. */
  synced?(gatewayId: string): void;
  /** A gateway's lease here was added, replaced (renewed, deadline moved) or dropped: see lease(). */
  lease?(gatewayId: string): void;
}

/** A record Redis holds that no live lease backs, named exactly so its deletion can be fenced. */
export interface StaleRecord {
  readonly field: string;
  readonly sessionId: string;
  readonly epoch: number;
}

function sameRecord(a: PresenceRecord | undefined, b: PresenceRecord | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  return a.gatewayId === b.gatewayId && a.sessionId === b.sessionId && a.epoch === b.epoch && a.instanceId === b.instanceId && a.since === b.since;
}

export class PresenceMirror {
  private readonly remote = new Map<string, StoredRecord>();
  private readonly byGateway = new Map<string, Set<string>>();
  private readonly leases = new Map<string, GatewayLease>();
  private readonly local = new Map<string, PresenceRecord>();
  private readonly visible = new Map<string, PresenceRecord>();
  /** The highest epoch seen per sandbox; outlives records so an offline claim still picks a higher one. */
  private readonly known = new Map<string, number>();
  private term = -1;

  constructor(
    readonly gatewayId: string,
    readonly incarnation: string,
    private readonly events: MirrorEvents,
  ) {}

  get(field: string): PresenceRecord | undefined {
    return this.visible.get(field);
  }

  list(): IterableIterator<PresenceRecord> {
    return this.visible.values();
  }

  localRecord(field: string): PresenceRecord | undefined {
    return this.local.get(field);
  }

  localRecords(): PresenceRecord[] {
    return [...this.local.values()];
  }

  /** The epoch a claim made without Redis takes: above anything this gateway has seen for the sandbox. */
  nextEpoch(field: string): number {
    return (this.known.get(field) ?? 0) + 1;
  }

  /** A gateway's live lease here, with what it published and its local-clock deadline. */
  lease(gatewayId: string): GatewayLease | undefined {
    return this.leases.get(gatewayId);
  }

  leaseIncarnation(gatewayId: string): string | undefined {
    return this.leases.get(gatewayId)?.incarnation;
  }

  /**
   * The presence term this gateway works in (see the class comment). On a change, every known lease
   * counts at least until `graceDeadline`: the new master may hold an older renewal of a live peer (or
   * none), and the peer needs a renewal period to reach it.
   */
  setTerm(term: number, graceDeadline?: number): void {
    if (term !== this.term && graceDeadline !== undefined) {
      for (const [id, l] of this.leases) {
        if (l.deadline >= graceDeadline) continue;
        this.leases.set(id, { ...l, deadline: graceDeadline });
        this.events.lease?.(id);
      }
    }
    this.term = term;
  }

  /**
   * Whether a full scan may replace this gateway's records: it has re-asserted them in the current term,
   * or it holds no lease here. A gateway without a lease has no records to protect (none of them counts),
   * and a scan must be able to replace them: a dead gateway's sandboxes claimed elsewhere since would
   * otherwise stay unseen whenever the scan's counter covered the claim's message.
   */
  private synced(gatewayId: string): boolean {
    if (gatewayId === this.gatewayId) return true;
    const l = this.leases.get(gatewayId);
    return l === undefined || l.term >= this.term;
  }

  /** Records a local session (after its claim or re-assert). Returns whether Redis already shows it superseded. */
  setLocal(record: PresenceRecord): boolean {
    const field = fieldOf(record.namespace, record.name);
    this.raiseKnown(field, record.epoch);
    this.local.set(field, record);
    this.refresh(field);
    return this.supersededBy(field) !== undefined;
  }

  /** Drops the local session for `field` if it is `sessionId`'s; returns the dropped record. */
  deleteLocal(field: string, sessionId: string): PresenceRecord | undefined {
    const l = this.local.get(field);
    if (l === undefined || l.sessionId !== sessionId) return undefined;
    this.local.delete(field);
    this.refresh(field);
    return l;
  }

  /** Re-checks one local session against Redis's record; fires `lost` and drops it when superseded. */
  checkLost(field: string): void {
    const l = this.local.get(field);
    if (l === undefined || this.supersededBy(field) === undefined) return;
    this.local.delete(field);
    this.refresh(field);
    this.events.lost(l);
  }

  /** Drops a local session that a fenced write found superseded, firing `lost`. */
  loseLocal(field: string, sessionId: string): void {
    const l = this.deleteLocal(field, sessionId);
    if (l !== undefined) this.events.lost(l);
  }

  /** Applies Redis's record for one sandbox (undefined = deleted). */
  putRemote(field: string, stored: StoredRecord | undefined): void {
    this.setRemote(field, stored);
    this.checkLost(field);
    this.refresh(field);
  }

  /** Replaces every remote record with a full scan's result. */
  replaceRemote(records: ReadonlyMap<string, StoredRecord>): void {
    const fields = new Set([...this.remote.keys(), ...records.keys()]);
    for (const f of fields) {
      const before = this.remote.get(f);
      const next = records.get(f);
      if ((before !== undefined && !this.synced(before.record.gatewayId)) || (next !== undefined && !this.synced(next.record.gatewayId))) continue;
      this.setRemote(f, next);
    }
    for (const f of fields) {
      this.checkLost(f);
      this.refresh(f);
    }
  }

  /** Adds or updates one live lease. */
  putLease(lease: GatewayLease): void {
    const before = this.leases.get(lease.gatewayId);
    const wasSynced = this.synced(lease.gatewayId);
    this.leases.set(lease.gatewayId, lease);
    this.events.lease?.(lease.gatewayId);
    if (before === undefined || before.incarnation !== lease.incarnation) this.refreshGateway(lease.gatewayId);
    // A lease seen for the first time is read together with its records; only a known one that catches
    // up to the term needs another scan.
    if (before !== undefined && !wasSynced && this.synced(lease.gatewayId)) this.events.synced?.(lease.gatewayId);
  }

  dropLease(gatewayId: string): void {
    if (!this.leases.delete(gatewayId)) return;
    this.events.lease?.(gatewayId);
    this.refreshGateway(gatewayId);
  }

  /** Replaces the live leases with a script's list (a gateway missing from it is not live). */
  replaceLeases(leases: readonly GatewayLease[]): void {
    const next = new Map(leases.map((l) => [l.gatewayId, l] as const));
    // A peer that has not renewed on the new master yet keeps its lease until the grace of setTerm ends.
    for (const id of this.leases.keys()) if (!next.has(id) && this.synced(id)) this.dropLease(id);
    for (const l of next.values()) this.putLease(l);
  }

  /** Drops leases whose deadline has passed; returns the earliest remaining deadline. */
  expireLeases(now: number): number | undefined {
    let next: number | undefined;
    for (const l of [...this.leases.values()]) {
      if (l.deadline <= now) this.dropLease(l.gatewayId);
      else if (next === undefined || l.deadline < next) next = l.deadline;
    }
    return next;
  }

  /**
   * Records Redis holds that nothing keeps alive: another gateway's with no live lease under the
   * incarnation that wrote them, and this gateway's that are not current local sessions.
   */
  staleRecords(): StaleRecord[] {
    const out: StaleRecord[] = [];
    for (const [field, s] of this.remote) {
      const r = s.record;
      const stale = r.gatewayId === this.gatewayId ? s.incarnation !== this.incarnation || this.local.get(field)?.sessionId !== r.sessionId : !this.leaseBacks(s);
      if (stale) out.push({ field, sessionId: r.sessionId, epoch: r.epoch });
    }
    return out;
  }

  private setRemote(field: string, stored: StoredRecord | undefined): void {
    const before = this.remote.get(field);
    if (before !== undefined) this.byGateway.get(before.record.gatewayId)?.delete(field);
    if (stored === undefined) {
      this.remote.delete(field);
      return;
    }
    this.remote.set(field, stored);
    this.raiseKnown(field, stored.record.epoch);
    const gw = stored.record.gatewayId;
    let set = this.byGateway.get(gw);
    if (set === undefined) this.byGateway.set(gw, (set = new Set()));
    set.add(field);
  }

  private raiseKnown(field: string, epoch: number): void {
    if (epoch > (this.known.get(field) ?? 0)) this.known.set(field, epoch);
  }

  private isOwn(s: StoredRecord): boolean {
    return s.record.gatewayId === this.gatewayId && s.incarnation === this.incarnation;
  }

  private leaseBacks(s: StoredRecord): boolean {
    return this.leases.get(s.record.gatewayId)?.incarnation === s.incarnation;
  }

  private supersededBy(field: string): StoredRecord | undefined {
    const l = this.local.get(field);
    const r = this.remote.get(field);
    if (l === undefined || r === undefined || this.isOwn(r)) return undefined;
    if (r.record.epoch > l.epoch || (r.record.epoch === l.epoch && r.record.sessionId !== l.sessionId)) return r;
    return undefined;
  }

  private effective(field: string): PresenceRecord | undefined {
    const l = this.local.get(field);
    if (l !== undefined) return l;
    const r = this.remote.get(field);
    if (r === undefined || r.record.gatewayId === this.gatewayId || !this.leaseBacks(r)) return undefined;
    return r.record;
  }

  private refreshGateway(gatewayId: string): void {
    for (const f of [...(this.byGateway.get(gatewayId) ?? [])]) this.refresh(f);
  }

  private refresh(field: string): void {
    const next = this.effective(field);
    const before = this.visible.get(field);
    if (sameRecord(before, next)) return;
    if (next === undefined) this.visible.delete(field);
    else this.visible.set(field, next);
    const r = next ?? before!;
    this.events.change(r.namespace, r.name, next);
  }
}

import { compose } from '../domain/compose.js';
import type { RouteEntry, RouteTable } from '../domain/decide.js';
import { isIP } from 'node:net';
import type { BackendSnapshot, Condition, DriverEvent, Endpoint, Presence, PublicStatus } from '../domain/sandbox.js';
import { sandboxKey } from '../domain/sandbox.js';
import { flat } from '../domain/flat-string.js';
import { classifyIds, compareClaimants, hasLegacyForm, legacyId, type IdRefusal } from '../domain/sandbox-ids.js';
import { IdIndex } from './id-index.js';
import { NameIndex } from './name-index.js';
import { ChangeWaiters, type WaiterLimits } from './waiters.js';

/**
 * The in-memory view of every sandbox: the only thing the hot path reads.
 *
 * Driver events are applied in order: a snapshot older than the one held (by resourceVersion) is dropped;
 * a snapshot of a deleted incarnation (its uid is tombstoned) is dropped, so a late event can neither
 * resurrect a deleted sandbox nor overwrite its re-created successor. Presence (live supervisor sessions,
 * cluster-wide) is held apart from snapshots and may arrive before them. Each change recomposes the
 * public status of that one sandbox and notifies listeners and waiters.
 *
 * Ids (domain/sandbox-ids.ts): a legacy-form id resolves only as `<namespace>--<name>`; a declared id
 * resolves to its first claimant (id-index.ts). A sandbox refused an id keeps every other name, carries
 * an `IdConflict` condition, and is reported to the id-refusal listeners (driver warning and metric).
 */

export interface ViewEntry extends RouteEntry {
  readonly snapshot: BackendSnapshot;
  readonly presence: Presence | undefined;
  /** The driver that reported the sandbox. */
  readonly driver: string;
  /** The view's change counter when this entry last changed (an SSE event id). */
  readonly version: number;
  /** Declared ids this sandbox competes for (no legacy form). */
  readonly idClaims: readonly string[];
  /** Declared ids it was refused: held by another sandbox, or another sandbox's legacy id. */
  readonly refusedIds: readonly string[];
}

/** A sandbox was refused an id it declares (newly: not reported again while the refusal lasts). */
export interface IdRefused {
  readonly driver: string;
  readonly namespace: string;
  readonly name: string;
  readonly id: string;
  readonly reason: IdRefusal;
  /** The sandbox holding the id (for operators' logs only: never shown to the refused sandbox's tenant). */
  readonly holder: string | undefined;
}

/** The condition a sandbox refused an id carries (visible in the status API). */
export const ID_CONFLICT = 'IdConflict';
/** Ids named in the condition's message; the rest are counted. */
const MAX_IDS_IN_MESSAGE = 8;
const NONE: readonly string[] = Object.freeze([]);

/** Called after every change: `entry` is undefined when the sandbox left the view, `previous` when it was not in it. */
export type ChangeListener = (key: string, entry: ViewEntry | undefined, version: number, previous: ViewEntry | undefined) => void;

export interface ViewOptions {
  /** Epoch milliseconds. */
  readonly now: () => number;
  /** How long a deleted uid stays fenced (OpenKruise's gateway keeps 10 minutes). */
  readonly tombstoneTtlMs: number;
  readonly waiters: WaiterLimits;
  /** Derives a sandbox's traffic token from its id (HMAC with the gateway's secret), for `accessToken: {derived}`. */
  readonly deriveToken?: ((sandboxId: string) => string) | undefined;
}

export const DEFAULT_VIEW_OPTIONS: ViewOptions = {
  now: Date.now,
  tombstoneTtlMs: 10 * 60_000,
  waiters: { perSandbox: 1000, total: 10_000 },
};

function isDecimal(s: string): boolean {
  if (s.length === 0) return false;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x30 || c > 0x39) return false;
  }
  return true;
}

/** Index of the first significant digit of a decimal string (leading zeros skipped; "0" keeps its zero). */
function significant(s: string): number {
  let i = 0;
  while (i < s.length - 1 && s.charCodeAt(i) === 0x30) i++;
  return i;
}

/** True when `next` is not newer than `held`; only decimal versions are ordered (others are opaque). */
export function isStale(held: string, next: string): boolean {
  if (!isDecimal(held) || !isDecimal(next)) return held === next;
  const i = significant(held);
  const j = significant(next);
  const a = held.length - i;
  const b = next.length - j;
  if (a !== b) return b < a;
  // Same number of significant digits: compare them in place (no zero-stripped copies on every update).
  for (let k = 0; k < a; k++) {
    const d = next.charCodeAt(j + k) - held.charCodeAt(i + k);
    if (d !== 0) return d < 0;
  }
  return true;
}

/** A token no request can present (header values never hold NUL): a derived token with no secret fails closed. */
const UNMATCHABLE = '\u0000no-traffic-token-secret';

/**
 * The sandbox's traffic token. A derived token is HMAC(secret, id) over the sandbox's first id that it
 * holds (one of `claims` not refused as `inUse`: a refused id's token would be the holder's) or its
 * legacy id.
 */
function accessTokenOf(s: BackendSnapshot, claims: readonly string[], inUse: readonly string[], derive: ((id: string) => string) | undefined): string | undefined {
  const t = s.accessToken;
  if (t === undefined || typeof t === 'string') return t;
  if (derive === undefined) return UNMATCHABLE;
  const own = legacyId(s.namespace, s.name);
  for (const id of s.ids) if (id === own || (claims.includes(id) && !inUse.includes(id))) return derive(id);
  return derive(own);
}

function sameList<T>(a: readonly T[], b: readonly T[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function idConflict(inUse: readonly string[], foreign: readonly string[]): Condition {
  const parts = [...inUse.map((id) => `${JSON.stringify(id)} is held by another sandbox`), ...foreign.map((id) => `${JSON.stringify(id)} is the <namespace>--<name> id of another sandbox`)];
  const shown = parts.slice(0, MAX_IDS_IN_MESSAGE).join('; ');
  const more = parts.length > MAX_IDS_IN_MESSAGE ? `; and ${parts.length - MAX_IDS_IN_MESSAGE} more` : '';
  return {
    type: ID_CONFLICT,
    status: 'True',
    reason: inUse.length > 0 ? 'IdInUse' : 'IdNamesAnotherSandbox',
    message: `Refused ids (this sandbox is not reachable by them): ${shown}${more}`,
  };
}

function sameEndpoint(a: Endpoint, b: Endpoint): boolean {
  if (a === b) return true;
  switch (a.kind) {
    case 'address':
      return b.kind === 'address' && sameList(a.addresses, b.addresses);
    case 'service':
      return b.kind === 'service' && a.fqdn === b.fqdn;
    case 'relay':
      return b.kind === 'relay';
  }
}

/**
 * `next`'s conditions with `held`'s objects where they are equal (and `held`'s list when all are), and
 * `held`'s strings in a condition that changed only some fields.
 */
function sharedConditions(held: readonly Condition[], next: readonly Condition[]): readonly Condition[] {
  if (held.length !== next.length) return next;
  const out = new Array<Condition>(next.length);
  let same = true;
  for (let i = 0; i < next.length; i++) {
    const h = held[i]!;
    const c = next[i]!;
    if (h.type !== c.type) {
      out[i] = c;
      same = false;
    } else if (c.status === h.status && c.reason === h.reason && c.message === h.message && c.lastTransitionTime === h.lastTransitionTime) {
      out[i] = h;
    } else {
      out[i] = { type: h.type, status: c.status, reason: c.reason === h.reason ? h.reason : c.reason, message: c.message === h.message ? h.message : c.message, lastTransitionTime: c.lastTransitionTime };
      same = false;
    }
  }
  return same ? held : out;
}

/**
 * An update of the incarnation `held` describes, holding `held`'s own strings, lists and objects wherever
 * they are equal. What the view keeps of an update then is mostly what changed: the decoded copies of the
 * rest die young instead of being copied by every scavenge and promoted (a heartbeat update changes a
 * version and a transition time; promoting its whole decoded snapshot grew the old generation by about
 * 270 bytes per update at 10k updates/s, and made full GCs).
 */
function sharedWithHeld(held: BackendSnapshot, s: BackendSnapshot): BackendSnapshot {
  return {
    ...s,
    namespace: held.namespace,
    name: held.name,
    uid: held.uid,
    instanceId: s.instanceId === held.instanceId ? held.instanceId : s.instanceId,
    ids: sameList(held.ids, s.ids) ? held.ids : s.ids,
    conditions: sharedConditions(held.conditions, s.conditions),
    endpoint: sameEndpoint(held.endpoint, s.endpoint) ? held.endpoint : s.endpoint,
    ports: s.ports !== undefined && held.ports !== undefined && sameList(held.ports, s.ports) ? held.ports : s.ports,
    h2cPorts: s.h2cPorts !== undefined && held.h2cPorts !== undefined && sameList(held.h2cPorts, s.h2cPorts) ? held.h2cPorts : s.h2cPorts,
    tcpPorts: s.tcpPorts !== undefined && held.tcpPorts !== undefined && sameList(held.tcpPorts, s.tcpPorts) ? held.tcpPorts : s.tcpPorts,
    publicPorts: s.publicPorts !== undefined && held.publicPorts !== undefined && sameList(held.publicPorts, s.publicPorts) ? held.publicPorts : s.publicPorts,
  };
}

function upstreamHostOf(endpoint: Endpoint): string | undefined {
  switch (endpoint.kind) {
    case 'address': {
      const a = endpoint.addresses[0];
      if (a === undefined) return undefined;
      return isIP(a) === 6 ? '[' + a + ']' : a;
    }
    case 'service':
      return endpoint.fqdn;
    case 'relay':
      return undefined;
  }
}

export class SandboxView implements RouteTable {
  private readonly entries = new Map<string, ViewEntry>();
  /** The same entries by namespace and name: what get() reads on every request. Kept in step with `entries` by put() and remove() alone. */
  private readonly byName = new NameIndex<ViewEntry>();
  private readonly ids = new IdIndex((key) => this.entries.get(key)?.snapshot);
  private readonly refused = { in_use: 0, names_another_sandbox: 0 };
  private readonly idListeners = new Set<(r: IdRefused) => void>();
  private readonly presence = new Map<string, Presence>();
  /** Deleted uids → when the fence lifts. */
  private readonly tombstones = new Map<string, number>();
  /** Keys of entries with a shutdownTime, checked by tick(). */
  private readonly expiring = new Set<string>();
  private readonly drivers = new Map<string, boolean>();
  /** Cached `synced`: read on every decision. */
  private allSynced = true;
  /** Gateway id → its relay listener `host:port` (the presence store reads it from gateway leases). */
  private relayResolver: (gatewayId: string) => string | undefined = () => undefined;
  private readonly listeners = new Set<ChangeListener>();
  private changeCounter = 0;
  private tokenCount = 0;
  readonly waiters: ChangeWaiters;
  /** Epoch ms each Ready sandbox became Ready (as this gateway saw it): idle time and connect retries start there. */
  private readonly readyAt = new Map<string, number>();
  private readonly opts: ViewOptions;

  constructor(opts: Partial<ViewOptions> = {}) {
    this.opts = { ...DEFAULT_VIEW_OPTIONS, ...opts };
    this.waiters = new ChangeWaiters(this.opts.waiters);
  }

  /** True once every registered driver has delivered a full list. */
  get synced(): boolean {
    return this.allSynced;
  }

  get size(): number {
    return this.entries.size;
  }

  /** Sandboxes with a traffic or envd token or an own access policy (when none has and no key store is set, requests skip the access check). */
  get tokenSandboxes(): number {
    return this.tokenCount;
  }

  get version(): number {
    return this.changeCounter;
  }

  /** Drivers not yet synced, for /readyz. */
  unsyncedDrivers(): string[] {
    return [...this.drivers].filter(([, synced]) => !synced).map(([id]) => id);
  }

  registerDriver(id: string): void {
    if (!this.drivers.has(id)) {
      this.drivers.set(id, false);
      this.allSynced = false;
    }
  }

  relayAddress(gatewayId: string): string | undefined {
    return this.relayResolver(gatewayId);
  }

  /** Sets how a gateway's relay listener is found (wiring: the presence store's view of gateway leases). */
  setRelayResolver(resolve: (gatewayId: string) => string | undefined): void {
    this.relayResolver = resolve;
  }

  get(namespace: string, name: string): ViewEntry | undefined {
    return this.byName.get(namespace, name);
  }

  getById(id: string): ViewEntry | undefined {
    if (!hasLegacyForm(id)) {
      const key = this.ids.holder(id);
      return key === undefined ? undefined : this.entries.get(key);
    }
    // The legacy id `<namespace>--<name>` (OpenKruise), and nothing else: a declared id never shadows it.
    // Namespaces and names may hold `--` themselves, so each split point is a reading; when two sandboxes
    // read the same, the first claimant wins as for declared ids.
    let best: ViewEntry | undefined;
    for (let i = id.indexOf('--', 1); i > 0 && i + 2 < id.length; i = id.indexOf('--', i + 1)) {
      const hit = this.entries.get(id.slice(0, i) + '/' + id.slice(i + 2));
      if (hit !== undefined && (best === undefined || compareClaimants(hit.snapshot, best.snapshot) < 0)) best = hit;
    }
    return best;
  }

  /** Id claims refused right now, by reason (metrics). */
  refusedIdCounts(): Readonly<Record<IdRefusal, number>> {
    return this.refused;
  }

  /** Called when a sandbox is newly refused an id (driver warning, metric). */
  onIdRefused(listener: (r: IdRefused) => void): () => void {
    this.idListeners.add(listener);
    return () => this.idListeners.delete(listener);
  }

  /** Sandboxes per public phase (metrics). */
  phaseCounts(): Map<string, number> {
    const counts = new Map<string, number>();
    for (const e of this.entries.values()) counts.set(e.status.phase, (counts.get(e.status.phase) ?? 0) + 1);
    return counts;
  }

  *list(): IterableIterator<ViewEntry> {
    yield* this.entries.values();
  }

  presenceOf(namespace: string, name: string): Presence | undefined {
    return this.presence.get(sandboxKey(namespace, name));
  }

  onChange(listener: ChangeListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Epoch ms a Ready sandbox became Ready (as this gateway saw it); undefined when not Ready. */
  readySince(key: string): number | undefined {
    return this.readyAt.get(key);
  }

  /** Keys of the Ready sandboxes and the epoch ms each became Ready. */
  readyEntries(): IterableIterator<[string, number]> {
    return this.readyAt.entries();
  }

  /** Applies one driver event; returns false when it was stale or fenced and changed nothing. */
  apply(driver: string, event: DriverEvent): boolean {
    const now = this.opts.now();
    if (event.type === 'delete') {
      const key = sandboxKey(event.namespace, event.name);
      this.fence(event.uid, now);
      const held = this.entries.get(key);
      if (held === undefined || held.snapshot.uid !== event.uid) return false;
      this.remove(key, held);
      return true;
    }
    let s = event.snapshot;
    // The held entry is found by the event's own namespace and name strings, and its key (hashed once,
    // when it was first put) serves every further map operation: a busy driver's updates build no key.
    const held = this.byName.get(s.namespace, s.name);
    const sameUid = held !== undefined && held.snapshot.uid === s.uid;
    // A held uid is never fenced (a uid is fenced only as its entry leaves or is replaced): only an event
    // for a sandbox not held under this uid needs the tombstones read.
    if (!sameUid) {
      const fence = this.tombstones.get(s.uid);
      if (fence !== undefined) {
        if (fence > now) return false;
        this.tombstones.delete(s.uid);
      }
    }
    if (held !== undefined) {
      if (sameUid) {
        if (isStale(held.snapshot.resourceVersion, s.resourceVersion)) return false;
        s = sharedWithHeld(held.snapshot, s);
      } else {
        // A new incarnation under the same name: the old uid is fenced from here on.
        this.fence(held.snapshot.uid, now);
      }
    }
    // A held entry carries the presence the map holds for it (setPresence() re-puts the entry on every change).
    const key = held !== undefined ? held.key : flat(sandboxKey(s.namespace, s.name));
    this.put(key, driver, s, held !== undefined ? held.presence : this.presence.get(key), now, sameUid ? held.status : undefined, held);
    return true;
  }

  /** Replaces everything `driver` reported with a full list (initial list and resyncs), then marks it synced. */
  replace(driver: string, snapshots: readonly BackendSnapshot[]): void {
    const seen = new Set<string>();
    for (const s of snapshots) {
      seen.add(sandboxKey(s.namespace, s.name));
      this.apply(driver, { type: 'upsert', snapshot: s });
    }
    for (const [key, e] of [...this.entries]) {
      if (e.driver === driver && !seen.has(key)) {
        this.fence(e.snapshot.uid, this.opts.now());
        this.remove(key, e);
      }
    }
    this.drivers.set(driver, true);
    this.allSynced = [...this.drivers.values()].every(Boolean);
  }

  /** Sets or clears the cluster-wide presence of one sandbox. */
  setPresence(namespace: string, name: string, p: Presence | undefined): void {
    const key = sandboxKey(namespace, name);
    const before = this.presence.get(key);
    if (p === undefined) {
      if (before === undefined) return;
      this.presence.delete(key);
    } else {
      if (before !== undefined && before.sessionId === p.sessionId && before.epoch === p.epoch && before.gatewayId === p.gatewayId) return;
      this.presence.set(key, p);
    }
    const held = this.entries.get(key);
    if (held !== undefined) this.recompose(key, held, p, this.opts.now());
  }

  /** Recomposes time-dependent statuses (expiry) and lifts old fences. Called periodically. */
  tick(): void {
    const now = this.opts.now();
    for (const key of this.expiring) {
      const e = this.entries.get(key);
      if (e === undefined) {
        this.expiring.delete(key);
        continue;
      }
      if (e.snapshot.shutdownTime !== undefined && e.snapshot.shutdownTime <= now && e.status.phase !== 'Deleting') this.recompose(key, e, e.presence, now);
    }
    for (const [uid, until] of this.tombstones) if (until <= now) this.tombstones.delete(uid);
  }

  private fence(uid: string, now: number): void {
    this.tombstones.set(uid, now + this.opts.tombstoneTtlMs);
  }

  private put(
    key: string,
    driver: string,
    s: BackendSnapshot,
    presence: Presence | undefined,
    now: number,
    prior: PublicStatus | undefined,
    held: ViewEntry | undefined,
  ): void {
    const { claims, foreign } = classifyIds(s.namespace, s.name, s.ids);
    const heldClaims = held?.idClaims ?? NONE;
    // Most sandboxes declare no id, and most updates keep the ids and the creation time (the claim order):
    // neither touches the index.
    const unchanged = held !== undefined && held.snapshot.createdAt === s.createdAt && sameList(heldClaims, claims);
    const others = !unchanged && (claims.length > 0 || heldClaims.length > 0) ? this.ids.update({ key, namespace: s.namespace, name: s.name, createdAt: s.createdAt }, heldClaims, claims) : undefined;
    const inUse = claims.length === 0 || this.holdsAll(key, claims) ? NONE : claims.filter((id) => this.ids.holder(id) !== key);
    const refusedIds = inUse.length === 0 && foreign.length === 0 ? NONE : [...inUse, ...foreign];
    let status = compose(s, presence, now, prior);
    if (refusedIds.length > 0) status = { ...status, conditions: [...status.conditions, idConflict(inUse, foreign)] };
    const version = ++this.changeCounter;
    const entry: ViewEntry = {
      key,
      namespace: s.namespace,
      name: s.name,
      uid: s.uid,
      status,
      // The same endpoint and ports objects (a recomposition of the held snapshot, or an update that
      // sharedWithHeld() gave the held ones: most are status heartbeats) keep the values worked out from them.
      upstreamHost: held !== undefined && s.endpoint === held.snapshot.endpoint ? held.upstreamHost : upstreamHostOf(s.endpoint),
      ports: s.ports === undefined ? undefined : held?.ports !== undefined && s.ports === held.snapshot.ports ? held.ports : new Set(s.ports),
      h2cPorts: s.h2cPorts === undefined ? undefined : held?.h2cPorts !== undefined && s.h2cPorts === held.snapshot.h2cPorts ? held.h2cPorts : new Set(s.h2cPorts),
      tcpPorts: s.tcpPorts === undefined ? undefined : held?.tcpPorts !== undefined && s.tcpPorts === held.snapshot.tcpPorts ? held.tcpPorts : new Set(s.tcpPorts),
      publicPorts: s.publicPorts === undefined ? undefined : held?.publicPorts !== undefined && s.publicPorts === held.snapshot.publicPorts ? held.publicPorts : new Set(s.publicPorts),
      relayOwner: s.endpoint.kind === 'relay' ? presence?.gatewayId : undefined,
      accessToken: accessTokenOf(s, claims, inUse, this.opts.deriveToken),
      envdAccessToken: s.envdAccessToken,
      access: s.access,
      snapshot: s,
      presence,
      driver,
      version,
      idClaims: claims.length === 0 ? NONE : claims,
      refusedIds,
    };
    if (held !== undefined && (held.accessToken !== undefined || held.envdAccessToken !== undefined || held.access !== undefined)) this.tokenCount--;
    if (entry.accessToken !== undefined || entry.envdAccessToken !== undefined || entry.access !== undefined) this.tokenCount++;
    this.countRefusals(held, -1);
    this.countRefusals(entry, 1);
    this.entries.set(key, entry);
    this.byName.set(entry);
    if (status.phase !== 'Ready') this.readyAt.delete(key);
    else if (held?.status.phase !== 'Ready') this.readyAt.set(key, now);
    if (s.shutdownTime !== undefined) this.expiring.add(key);
    else if (held?.snapshot.shutdownTime !== undefined) this.expiring.delete(key);
    this.emit(key, entry, version, held);
    for (const id of inUse) if (!held?.refusedIds.includes(id)) this.reportRefusal(entry, id, 'in_use');
    for (const id of foreign) if (!held?.refusedIds.includes(id)) this.reportRefusal(entry, id, 'names_another_sandbox');
    if (others !== undefined) this.restatus(others, now);
  }

  /** Puts a held sandbox again with its own snapshot (presence, expiry or an id moved). */
  private recompose(key: string, e: ViewEntry, presence: Presence | undefined, now: number): void {
    this.put(key, e.driver, e.snapshot, presence, now, e.status, e);
  }

  private holdsAll(key: string, ids: readonly string[]): boolean {
    for (const id of ids) if (this.ids.holder(id) !== key) return false;
    return true;
  }

  /** Recomposes sandboxes that gained or lost an id through another sandbox's change. */
  private restatus(keys: ReadonlySet<string>, now: number): void {
    for (const k of keys) {
      const e = this.entries.get(k);
      if (e !== undefined) this.recompose(k, e, e.presence, now);
    }
  }

  private countRefusals(e: ViewEntry | undefined, sign: 1 | -1): void {
    if (e === undefined || e.refusedIds.length === 0) return;
    for (const id of e.refusedIds) {
      if (hasLegacyForm(id)) this.refused.names_another_sandbox += sign;
      else this.refused.in_use += sign;
    }
  }

  private reportRefusal(e: ViewEntry, id: string, reason: IdRefusal): void {
    if (this.idListeners.size === 0) return;
    const holder = reason === 'in_use' ? this.ids.holder(id) : this.getById(id)?.key;
    const r: IdRefused = { driver: e.driver, namespace: e.namespace, name: e.name, id, reason, holder };
    for (const l of this.idListeners) l(r);
  }

  private remove(key: string, held: ViewEntry): void {
    this.entries.delete(key);
    this.byName.delete(held.namespace, held.name);
    if (held.accessToken !== undefined || held.envdAccessToken !== undefined || held.access !== undefined) this.tokenCount--;
    this.expiring.delete(key);
    this.countRefusals(held, -1);
    this.readyAt.delete(key);
    const others = held.idClaims.length > 0 ? this.ids.update({ key, namespace: held.namespace, name: held.name, createdAt: held.snapshot.createdAt }, held.idClaims, NONE) : undefined;
    this.emit(key, undefined, ++this.changeCounter, held);
    // The next claimant of each id this sandbox held takes it over.
    if (others !== undefined) this.restatus(others, this.opts.now());
  }

  private emit(key: string, entry: ViewEntry | undefined, version: number, previous: ViewEntry | undefined): void {
    for (const l of this.listeners) l(key, entry, version, previous);
    this.waiters.notify(key);
  }
}

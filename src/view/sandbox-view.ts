import { compose } from '../domain/compose.js';
import type { RouteEntry, RouteTable } from '../domain/decide.js';
import { isIP } from 'node:net';
import type { BackendSnapshot, DriverEvent, Endpoint, Presence, PublicStatus } from '../domain/sandbox.js';
import { sandboxKey } from '../domain/sandbox.js';
import { ChangeWaiters, type WaiterLimits } from './waiters.js';

/**
 * The in-memory view of every sandbox: the only thing the hot path reads.
 *
 * Driver events are applied in order: a snapshot older than the one held (by resourceVersion) is dropped;
 * a snapshot of a deleted incarnation (its uid is tombstoned) is dropped, so a late event can neither
 * resurrect a deleted sandbox nor overwrite its re-created successor. Presence (live supervisor sessions,
 * cluster-wide) is held apart from snapshots and may arrive before them. Each change recomposes the
 * public status of that one sandbox and notifies listeners and waiters.
 */

export interface ViewEntry extends RouteEntry {
  readonly snapshot: BackendSnapshot;
  readonly presence: Presence | undefined;
  /** The driver that reported the sandbox. */
  readonly driver: string;
  /** The view's change counter when this entry last changed (an SSE event id). */
  readonly version: number;
}

/** Called after every change: `entry` is undefined when the sandbox left the view. */
export type ChangeListener = (key: string, entry: ViewEntry | undefined, version: number) => void;

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

/** True when `next` is not newer than `held`; only decimal versions are ordered (others are opaque). */
export function isStale(held: string, next: string): boolean {
  if (!isDecimal(held) || !isDecimal(next)) return held === next;
  const a = held.replace(/^0+(?=\d)/, '');
  const b = next.replace(/^0+(?=\d)/, '');
  if (a.length !== b.length) return b.length < a.length;
  return b <= a;
}

/** A token no request can present (header values never hold NUL): a derived token with no secret fails closed. */
const UNMATCHABLE = '\u0000no-traffic-token-secret';

function accessTokenOf(s: BackendSnapshot, derive: ((id: string) => string) | undefined): string | undefined {
  const t = s.accessToken;
  if (t === undefined || typeof t === 'string') return t;
  return derive === undefined ? UNMATCHABLE : derive(s.ids[0] ?? `${s.namespace}--${s.name}`);
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
  private readonly ids = new Map<string, ViewEntry>();
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

  /** Sandboxes that require a traffic token (when none do and no key store is set, requests skip the access check). */
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
    return this.entries.get(sandboxKey(namespace, name));
  }

  getById(id: string): ViewEntry | undefined {
    const e = this.ids.get(id);
    if (e !== undefined) return e;
    // The legacy id `<namespace>--<name>` (OpenKruise): try each split point.
    for (let i = id.indexOf('--'); i > 0; i = id.indexOf('--', i + 1)) {
      const hit = this.entries.get(id.slice(0, i) + '/' + id.slice(i + 2));
      if (hit !== undefined) return hit;
    }
    return undefined;
  }

  /** Sandboxes per public phase (metrics). */
  phaseCounts(): Map<string, number> {
    const counts = new Map<string, number>();
    for (const e of this.entries.values()) counts.set(e.status.phase, (counts.get(e.status.phase) ?? 0) + 1);
    return counts;
  }

  list(): IterableIterator<ViewEntry> {
    return this.entries.values();
  }

  presenceOf(namespace: string, name: string): Presence | undefined {
    return this.presence.get(sandboxKey(namespace, name));
  }

  onChange(listener: ChangeListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
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
    const s = event.snapshot;
    const key = sandboxKey(s.namespace, s.name);
    const fence = this.tombstones.get(s.uid);
    if (fence !== undefined) {
      if (fence > now) return false;
      this.tombstones.delete(s.uid);
    }
    const held = this.entries.get(key);
    if (held !== undefined) {
      if (held.snapshot.uid === s.uid) {
        if (isStale(held.snapshot.resourceVersion, s.resourceVersion)) return false;
      } else {
        // A new incarnation under the same name: the old uid is fenced from here on.
        this.fence(held.snapshot.uid, now);
      }
    }
    const prior = held !== undefined && held.snapshot.uid === s.uid ? held.status : undefined;
    this.put(key, driver, s, this.presence.get(key), now, prior, held);
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
    if (held !== undefined) this.put(key, held.driver, held.snapshot, p, this.opts.now(), held.status, held);
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
      if (e.snapshot.shutdownTime !== undefined && e.snapshot.shutdownTime <= now && e.status.phase !== 'Deleting') {
        this.put(key, e.driver, e.snapshot, e.presence, now, e.status, e);
      }
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
    const status = compose(s, presence, now, prior);
    const version = ++this.changeCounter;
    const entry: ViewEntry = {
      key,
      namespace: s.namespace,
      name: s.name,
      status,
      upstreamHost: upstreamHostOf(s.endpoint),
      ports: s.ports === undefined ? undefined : new Set(s.ports),
      relayOwner: s.endpoint.kind === 'relay' ? presence?.gatewayId : undefined,
      accessToken: accessTokenOf(s, this.opts.deriveToken),
      snapshot: s,
      presence,
      driver,
      version,
    };
    if (held !== undefined) for (const id of held.snapshot.ids) if (this.ids.get(id) === held) this.ids.delete(id);
    if (held?.accessToken !== undefined) this.tokenCount--;
    if (entry.accessToken !== undefined) this.tokenCount++;
    this.entries.set(key, entry);
    for (const id of s.ids) this.ids.set(id, entry);
    if (s.shutdownTime !== undefined) this.expiring.add(key);
    else this.expiring.delete(key);
    this.emit(key, entry, version);
  }

  private remove(key: string, held: ViewEntry): void {
    this.entries.delete(key);
    if (held.accessToken !== undefined) this.tokenCount--;
    this.expiring.delete(key);
    for (const id of held.snapshot.ids) if (this.ids.get(id) === held) this.ids.delete(id);
    this.emit(key, undefined, ++this.changeCounter);
  }

  private emit(key: string, entry: ViewEntry | undefined, version: number): void {
    for (const l of this.listeners) l(key, entry, version);
    this.waiters.notify(key);
  }
}

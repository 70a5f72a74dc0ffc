import type { Logger } from 'pino';
import { ListenerSet } from './presence-listeners.js';
import { fieldOf } from './redis-codec.js';
import type { PresenceListener, PresenceRecord, PresenceStore, SessionClaim } from './presence-store.js';

export interface MemoryPresenceOptions {
  /** Where a throwing listener is reported; without it, the first listener error is re-thrown to the caller. */
  readonly log?: Logger;
}

/**
 * Presence for a single gateway (the default single-process shape): every session is local, so the map
 * is the whole truth. It keeps the same contract as the Redis store: claims bump a per-sandbox epoch that
 * survives release, and release is remove-if-current, so a late cleanup of a superseded session leaves
 * its successor in place. Nothing can supersede a session from elsewhere, so `onLost` never fires, and
 * there is no backend to lose, so `degraded()` is always empty.
 */
export class MemoryPresence implements PresenceStore {
  readonly kind = 'memory' as const;
  private readonly records = new Map<string, PresenceRecord>();
  private readonly epochs = new Map<string, number>();
  private readonly changes = new ListenerSet<[string, string, PresenceRecord | undefined]>();
  private readonly losses = new ListenerSet<[PresenceRecord]>();

  constructor(
    readonly gatewayId: string,
    private readonly opts: MemoryPresenceOptions = {},
  ) {}

  async start(): Promise<void> {}

  async claim(namespace: string, name: string, session: SessionClaim): Promise<PresenceRecord> {
    const field = fieldOf(namespace, name);
    const epoch = (this.epochs.get(field) ?? 0) + 1;
    this.epochs.set(field, epoch);
    const record: PresenceRecord = { namespace, name, gatewayId: this.gatewayId, ...pick(session), epoch };
    this.records.set(field, record);
    this.emit(namespace, name, record);
    return record;
  }

  async release(namespace: string, name: string, sessionId: string): Promise<boolean> {
    const field = fieldOf(namespace, name);
    if (this.records.get(field)?.sessionId !== sessionId) return false;
    this.records.delete(field);
    this.emit(namespace, name, undefined);
    return true;
  }

  get(namespace: string, name: string): PresenceRecord | undefined {
    return this.records.get(fieldOf(namespace, name));
  }

  list(): Iterable<PresenceRecord> {
    return this.records.values();
  }

  onChange(listener: PresenceListener): () => void {
    return this.changes.add(listener);
  }

  onLost(listener: (record: PresenceRecord) => void): () => void {
    return this.losses.add(listener);
  }

  degraded(): string[] {
    return [];
  }

  async close(_opts: { release: boolean }): Promise<void> {}

  private emit(namespace: string, name: string, record: PresenceRecord | undefined): void {
    const errors = this.changes.emit(namespace, name, record);
    if (errors.length === 0) return;
    if (this.opts.log === undefined) throw errors[0];
    for (const err of errors) this.opts.log.error({ err, namespace, name }, 'presence listener failed');
  }
}

/** Copies only the claim's own fields, so a caller's extra properties never leak into a record. */
function pick(s: SessionClaim): SessionClaim {
  return { sessionId: s.sessionId, instanceId: s.instanceId, since: s.since };
}

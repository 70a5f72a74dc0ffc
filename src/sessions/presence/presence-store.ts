/**
 * Presence stores: which supervisor sessions are live, cluster-wide. `memory` serves one gateway;
 * `redis` shares presence between gateways through leases (docs/architecture.md, "Presence in Redis").
 *
 * Every store keeps an in-memory mirror that the hot path and the view read; only claim() and release()
 * (session connect and disconnect) and the store's own background work talk to the backend.
 */

export interface PresenceRecord {
  readonly namespace: string;
  readonly name: string;
  /** The gateway holding the session. */
  readonly gatewayId: string;
  readonly sessionId: string;
  /** The supervisor's instance (container / pod / VM incarnation). */
  readonly instanceId: string;
  /** Per-sandbox fencing token: grows with every claim, never reused. */
  readonly epoch: number;
  /** Epoch milliseconds the session was accepted. */
  readonly since: number;
}

export interface SessionClaim {
  readonly sessionId: string;
  readonly instanceId: string;
  readonly since: number;
}

/** A live gateway lease as the console shows it. */
export interface LiveLease {
  readonly gatewayId: string;
  /** What the gateway published with its lease (e.g. `relay`: its relay listener). */
  readonly info: Readonly<Record<string, string>>;
  /** Milliseconds until the lease lapses unless renewed. */
  readonly expiresInMs: number;
}

/** Called when the mirrored presence of a sandbox changes; `record` undefined = no live session. */
export type PresenceListener = (namespace: string, name: string, record: PresenceRecord | undefined) => void;

export interface PresenceStore {
  readonly kind: 'memory' | 'redis';
  readonly gatewayId: string;
  /** Loads the mirror and starts background work (lease renewal, subscription, re-scan). */
  start(): Promise<void>;
  /**
   * Records a new local session as the sandbox's presence. Bumps the sandbox's epoch atomically; the
   * returned record carries it. A store that cannot reach its backend still records locally (local
   * sessions are authoritative) and re-asserts later.
   */
  claim(namespace: string, name: string, session: SessionClaim): Promise<PresenceRecord>;
  /** Removes the presence only if it is still this session's (remove-if-current). Returns whether it did. */
  release(namespace: string, name: string, sessionId: string): Promise<boolean>;
  /** The mirrored cluster-wide presence of one sandbox (records of gateways whose lease lapsed are absent). */
  get(namespace: string, name: string): PresenceRecord | undefined;
  list(): Iterable<PresenceRecord>;
  onChange(listener: PresenceListener): () => void;
  /**
   * Called when another gateway's newer claim has superseded one of this gateway's local sessions (it was
   * partitioned or paused while the supervisor moved): the local session must be closed.
   */
  onLost(listener: (record: PresenceRecord) => void): () => void;
  /** What another gateway published in its live lease (e.g. its relay listener); stores of one gateway have none. */
  gatewayInfo?(gatewayId: string): Readonly<Record<string, string>> | undefined;
  /** The live gateway leases this store mirrors (the operator console's gateways view); stores of one gateway have none. */
  gatewayLeases?(): LiveLease[];
  /** Reasons the store is degraded (backend unreachable: serving from the mirror); empty when healthy. */
  degraded(): string[];
  /** Stops background work. `release: true` (graceful shutdown) deletes this gateway's lease and records at once. */
  close(opts: { release: boolean }): Promise<void>;
}

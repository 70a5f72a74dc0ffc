import { createHmac, randomBytes } from 'node:crypto';
import { ADMIN, ANONYMOUS, INVALID_KEY, type Principal } from '../domain/access.js';
import { isDnsLabel } from '../domain/labels.js';
import { SandgateError } from '../domain/errors.js';

/**
 * Team API keys. A key is shown once, at creation; stores keep only HMAC-SHA256(pepper, key) — a
 * database leak yields no usable key, and without the pepper not even a dictionary attack on the hashes.
 * Keys map to a team (= a namespace) or to the admin team, which reaches every namespace.
 */

export interface ApiKeyRecord {
  /** Short public id, for listing and revoking (never the key). */
  readonly id: string;
  readonly team: string;
  /** HMAC-SHA256(pepper, key), hex. */
  readonly hash: string;
  /** RFC 3339. */
  readonly createdAt: string;
}

/** A store of key records (file or Redis), mirrored in memory: lookups never do I/O. */
export interface ApiKeyStore {
  readonly kind: 'file' | 'redis';
  start(): Promise<void>;
  /** The record with this hash, from the in-memory mirror. */
  byHash(hash: string): ApiKeyRecord | undefined;
  list(): Promise<ApiKeyRecord[]>;
  add(record: ApiKeyRecord): Promise<void>;
  /** Removes the key with this id; false when there is none. Every gateway's mirror drops it within a second. */
  revoke(id: string): Promise<boolean>;
  /** True when the link with this id (`jti`) is revoked, from the in-memory mirror. */
  isLinkRevoked(id: string): boolean;
  /**
   * Revokes a link (and every cookie it set) until `r.expiresAt` (past it the link is dead anyway and the
   * entry lapses), counted against `r.namespace`: false, and nothing stored, when that namespace already
   * holds `perNamespace` unexpired revocations. O(1) in the store; every gateway's mirror has it within a
   * second.
   */
  revokeLink(r: RevokedLink, perNamespace: number): Promise<boolean>;
  /** Reasons the store is degraded (its backend unreachable); empty when healthy. */
  degraded(): string[];
  close(): Promise<void>;
}

export const KEY_PREFIX = 'sgk_';
const MAX_KEY_LENGTH = 256;

export function hashKey(pepper: Uint8Array, key: string): string {
  return createHmac('sha256', pepper).update(key).digest('hex');
}

/** A new key (32 random bytes) and its record. The key is returned to be shown once and never stored. */
export function newApiKey(pepper: Uint8Array, team: string, now = new Date()): { key: string; record: ApiKeyRecord } {
  if (!isDnsLabel(team)) throw new SandgateError('invalid_request', `team ${JSON.stringify(team)} must be a DNS-1123 label (a namespace, or the admin team)`);
  const key = KEY_PREFIX + randomBytes(32).toString('base64url');
  return { key, record: { id: 'k_' + randomBytes(6).toString('hex'), team, hash: hashKey(pepper, key), createdAt: now.toISOString() } };
}

/** A revoked link: its id, the namespace it counts against ('' for an id naming none), and when it expires anyway (epoch seconds). */
export interface RevokedLink {
  readonly id: string;
  readonly namespace: string;
  readonly expiresAt: number;
}

/** Link ids a store may hold: what `jti` is checked against (auth/link-tokens.ts). */
export const LINK_ID = /^[A-Za-z0-9_-]{1,128}$/;

/** The id of a revoked-link entry of the key file's `revokedLinks` list (still honoured); undefined for anything malformed. */
export function parseRevokedLinkId(raw: unknown): string | undefined {
  const o = raw as { id?: unknown; expiresAt?: unknown } | null;
  if (typeof o?.id !== 'string' || !LINK_ID.test(o.id) || typeof o.expiresAt !== 'number' || !Number.isFinite(o.expiresAt)) return undefined;
  return o.id;
}

/** Validates a record read from a store; undefined for anything malformed (it is skipped, never trusted). */
export function parseRecord(raw: unknown): ApiKeyRecord | undefined {
  if (typeof raw !== 'object' || raw === null) return undefined;
  const o = raw as Record<string, unknown>;
  if (typeof o.id !== 'string' || typeof o.team !== 'string' || typeof o.hash !== 'string' || typeof o.createdAt !== 'string') return undefined;
  if (!/^[0-9a-f]{64}$/.test(o.hash) || !isDnsLabel(o.team)) return undefined;
  return { id: o.id, team: o.team, hash: o.hash, createdAt: o.createdAt };
}

/**
 * Turns the key a request presents into a principal. The HMAC of recent keys is cached (a bounded map of
 * key → hash: a pure function, so revocation needs no invalidation — the record lookup decides).
 */
export class ApiKeyAuth {
  private readonly hashes = new Map<string, string>();

  constructor(
    private readonly store: ApiKeyStore,
    private readonly pepper: Uint8Array,
    private readonly adminTeam: string,
    private readonly cacheSize = 10_000,
  ) {}

  principal(key: string | undefined): Principal {
    if (key === undefined) return ANONYMOUS;
    if (key.length === 0 || key.length > MAX_KEY_LENGTH) return INVALID_KEY;
    let hash = this.hashes.get(key);
    if (hash === undefined) {
      hash = hashKey(this.pepper, key);
      if (this.hashes.size >= this.cacheSize) this.hashes.clear();
      this.hashes.set(key, hash);
    }
    const record = this.store.byHash(hash);
    if (record === undefined) return INVALID_KEY;
    return record.team === this.adminTeam ? ADMIN : { kind: 'team', team: record.team };
  }
}

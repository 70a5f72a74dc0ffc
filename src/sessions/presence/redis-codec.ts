import type { PresenceRecord } from './presence-store.js';

/**
 * Decoding of what the Redis presence store reads back: stored records, pub/sub messages and script
 * replies (the encodings are documented in redis-scripts.ts). Redis is shared infrastructure, so anything
 * malformed is rejected here (the caller logs and skips it) instead of reaching the mirror.
 */

/** A record as stored: the public record plus the incarnation of the lease it was written under. */
export interface StoredRecord {
  readonly record: PresenceRecord;
  readonly incarnation: string;
}

/** A gateway lease as the mirror holds it: expiry already translated to the local clock. */
export interface GatewayLease {
  readonly gatewayId: string;
  readonly incarnation: string;
  readonly info: Readonly<Record<string, string>>;
  /** The presence term in which the gateway last re-asserted its sessions (-1: none announced). */
  readonly term: number;
  /** Local-clock ms after which the lease no longer counts. */
  readonly deadline: number;
}

export type PresenceMessage =
  | { readonly v: number; readonly op: 'set'; readonly field: string; readonly stored: StoredRecord }
  | { readonly v: number; readonly op: 'del'; readonly field: string; readonly sessionId: string }
  | { readonly v: number; readonly op: 'del-many'; readonly fields: readonly string[] }
  | { readonly v: number; readonly op: 'gw'; readonly lease: Omit<GatewayLease, 'deadline'>; readonly expiry: number; readonly redisNow: number }
  | { readonly v: number; readonly op: 'gw-down'; readonly gatewayId: string; readonly incarnation: string; readonly fields: readonly string[] };

export function fieldOf(namespace: string, name: string): string {
  return `${namespace}/${name}`;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function isString(v: unknown): v is string {
  return typeof v === 'string';
}

/** Decodes a stored record (object or JSON text) for `field`; undefined when malformed. */
export function decodeRecord(field: string, raw: unknown): StoredRecord | undefined {
  let o: unknown = raw;
  if (isString(raw)) {
    try {
      o = JSON.parse(raw);
    } catch {
      return undefined;
    }
  }
  if (!isObject(o)) return undefined;
  const slash = field.indexOf('/');
  if (slash <= 0 || slash === field.length - 1) return undefined;
  const { g, i, s, n, e, t } = o;
  if (!isString(g) || !isString(i) || !isString(s) || !isString(n)) return undefined;
  const epoch = typeof e === 'number' ? e : Number(e);
  const since = typeof t === 'number' ? t : Number(t);
  if (!Number.isSafeInteger(epoch) || epoch < 1 || !Number.isFinite(since)) return undefined;
  return {
    incarnation: i,
    record: { namespace: field.slice(0, slash), name: field.slice(slash + 1), gatewayId: g, sessionId: s, instanceId: n, epoch, since },
  };
}

/** Decodes a gateway-info value: JSON {i: incarnation, a: {attributes}, t: synced term, k: shard count}. */
export function decodeGatewayInfo(raw: unknown): { incarnation: string; info: Record<string, string>; term: number } | undefined {
  if (!isString(raw) || raw === '') return undefined;
  let o: unknown;
  try {
    o = JSON.parse(raw);
  } catch {
    return undefined;
  }
  if (!isObject(o) || !isString(o.i)) return undefined;
  const info: Record<string, string> = {};
  // cjson encodes an empty Lua table as {} and the client sends {} too, so `a` is always an object.
  if (isObject(o.a)) for (const [k, v] of Object.entries(o.a)) if (isString(v)) info[k] = v;
  const term = typeof o.t === 'number' && Number.isSafeInteger(o.t) ? o.t : -1;
  return { incarnation: o.i, info, term };
}

/** `shards` (k) is the writer's --presence-shards, compared by the renew script (redis-scripts.ts). */
export function encodeGatewayInfo(incarnation: string, info: Readonly<Record<string, string>>, term: number, shards: number): string {
  return JSON.stringify({ i: incarnation, a: info, t: term, k: shards });
}

/** Decodes the flat [id, expiry, infoJson]... list scripts return, translating expiry to the local clock. */
export function decodeLeases(flat: unknown, redisNow: number, localNow: number): GatewayLease[] {
  if (!Array.isArray(flat)) return [];
  const out: GatewayLease[] = [];
  for (let j = 0; j + 2 < flat.length; j += 3) {
    const id = flat[j];
    const expiry = Number(flat[j + 1]);
    const info = decodeGatewayInfo(flat[j + 2]);
    if (!isString(id) || !Number.isFinite(expiry) || info === undefined) continue;
    // Only the remaining lifetime is taken from Redis's clock, so clock skew between hosts cancels out.
    out.push({ gatewayId: id, incarnation: info.incarnation, info: info.info, term: info.term, deadline: localNow + (expiry - redisNow) });
  }
  return out;
}

/** Decodes a pub/sub message; undefined when malformed. */
export function decodeMessage(text: string): PresenceMessage | undefined {
  let o: unknown;
  try {
    o = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (!isObject(o) || typeof o.v !== 'number') return undefined;
  const v = o.v;
  const fields = (x: unknown): string[] | undefined => (Array.isArray(x) ? x.filter(isString) : isObject(x) ? [] : undefined);
  switch (o.op) {
    case 'set': {
      if (!isString(o.f)) return undefined;
      const stored = decodeRecord(o.f, o.r);
      return stored === undefined ? undefined : { v, op: 'set', field: o.f, stored };
    }
    case 'del':
      return isString(o.f) && isString(o.s) ? { v, op: 'del', field: o.f, sessionId: o.s } : undefined;
    case 'del-many': {
      const fs = fields(o.fs);
      return fs === undefined ? undefined : { v, op: 'del-many', fields: fs };
    }
    case 'gw': {
      const info = decodeGatewayInfo(o.info);
      if (!isString(o.g) || info === undefined || typeof o.x !== 'number' || typeof o.n !== 'number') return undefined;
      return { v, op: 'gw', lease: { gatewayId: o.g, incarnation: info.incarnation, info: info.info, term: info.term }, expiry: o.x, redisNow: o.n };
    }
    case 'gw-down': {
      // cjson encodes an empty Lua array as {}, hence the object case in fields().
      const fs = fields(o.fs);
      if (!isString(o.g) || !isString(o.i) || fs === undefined) return undefined;
      return { v, op: 'gw-down', gatewayId: o.g, incarnation: o.i, fields: fs };
    }
    default:
      return undefined;
  }
}

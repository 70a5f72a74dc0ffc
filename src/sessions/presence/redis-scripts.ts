import { createHash } from 'node:crypto';

/**
 * The Lua scripts of the Redis presence store (docs/presence.md, "Scripts"). Each runs atomically on the
 * server (EVAL), so a check and the write it guards cannot interleave with another gateway's.
 *
 * Every script declares the same five keys, all under one hash tag (`{prefix}`), so on Redis Cluster they
 * live in one slot and a script may touch them all (Cluster rejects scripts whose keys span slots). The
 * pub/sub channel is passed as ARGV[1]: channels are not keys.
 *
 *   KEYS[1] {p}:gateways      sorted set: gateway id → lease expiry (Redis TIME, ms)
 *   KEYS[2] {p}:gateway-info  hash: gateway id → JSON {i: incarnation, a: {attributes}}
 *   KEYS[3] {p}:presence      hash: "namespace/name" → JSON record {g, i, s, n, e, t}
 *   KEYS[4] {p}:epochs        hash: "namespace/name" → the sandbox's epoch counter (never decreases)
 *   KEYS[5] {p}:version       string: a counter bumped by every published change
 *
 * Records: g gateway id, i the gateway's incarnation (a record counts only while the lease it was written
 * under is the live one), s session id, n supervisor instance id, e epoch, t accepted-at ms (a string, so
 * cjson's 14-digit number format cannot round it).
 */

export interface PresenceKeys {
  readonly gateways: string;
  readonly gatewayInfo: string;
  readonly presence: string;
  readonly epochs: string;
  readonly version: string;
  readonly channel: string;
}

/** Key names for a prefix: one hash tag, so every key hashes to the same Cluster slot. */
export function presenceKeys(prefix: string): PresenceKeys {
  const tag = `{${prefix}}`;
  return {
    gateways: `${tag}:gateways`,
    gatewayInfo: `${tag}:gateway-info`,
    presence: `${tag}:presence`,
    epochs: `${tag}:epochs`,
    version: `${tag}:version`,
    channel: `${tag}:presence-changes`,
  };
}

/** The keys in the order every script declares them. */
export function scriptKeys(k: PresenceKeys): string[] {
  return [k.gateways, k.gatewayInfo, k.presence, k.epochs, k.version];
}

// Shared helpers, prepended to every script. TIME is allowed before writes because Redis 7 replicates
// scripts by their effects, not by re-running them.
const PRELUDE = `
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function publish(msg)
  msg.v = redis.call('INCR', KEYS[5])
  redis.call('PUBLISH', ARGV[1], cjson.encode(msg))
end
local function incarnation_of(gw)
  local info = redis.call('HGET', KEYS[2], gw)
  if not info then return nil end
  return cjson.decode(info).i
end
local function lease_live(gw, inc, now)
  local exp = redis.call('ZSCORE', KEYS[1], gw)
  if not exp or tonumber(exp) <= now then return false end
  return incarnation_of(gw) == inc
end
local function live_gateways(now)
  local z = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
  local out = {}
  for j = 1, #z, 2 do
    out[#out + 1] = z[j]
    out[#out + 1] = z[j + 1]
    out[#out + 1] = redis.call('HGET', KEYS[2], z[j]) or ''
  end
  return out
end
`;

/**
 * renew(channel, gw, incarnation, ttlMs, infoJson, forgetAfterMs) →
 *   {now, lapsed, usurped, version, [id, expiry, infoJson]...}
 * Extends this gateway's lease to TIME + ttl (ZADD) and stores its info (HSET). `lapsed` = the lease was
 * absent, expired or held by another incarnation, so records may have been collected and the caller must
 * re-assert its sessions; that is also published so peers start counting this gateway's records.
 * `usurped` = another live process holds the same gateway id (a misconfiguration). Leases expired longer
 * than forgetAfterMs are dropped (ZREM, HDEL). Touches no session record: its cost grows with gateways.
 */
const RENEW = `
local gw, inc, ttl = ARGV[2], ARGV[3], tonumber(ARGV[4])
local now = now_ms()
local prev = redis.call('ZSCORE', KEYS[1], gw)
local prev_inc = incarnation_of(gw)
local was_live = prev and tonumber(prev) > now
local lapsed = (not was_live) or prev_inc ~= inc
local usurped = was_live and prev_inc ~= inc
local exp = now + ttl
redis.call('ZADD', KEYS[1], exp, gw)
redis.call('HSET', KEYS[2], gw, ARGV[5])
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[6]))
for _, id in ipairs(old) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
end
if lapsed then publish({op = 'gw', g = gw, x = exp, n = now, info = ARGV[5]}) end
local v = tonumber(redis.call('GET', KEYS[5]) or '0')
return {now, lapsed and 1 or 0, usurped and 1 or 0, v, live_gateways(now)}
`;

/**
 * claim(channel, field, gw, incarnation, sessionId, instanceId, since, minEpoch) → epoch
 * A new session: epoch = max(stored + 1, minEpoch) (HGET/HSET on the epochs hash: the counter survives
 * the record), then the record is written (HSET) and published. minEpoch is the highest epoch the gateway
 * has seen for the sandbox plus one, which raises a counter that a Redis restart without persistence reset.
 */
const CLAIM = `
local f = ARGV[2]
local cur = tonumber(redis.call('HGET', KEYS[4], f) or '0')
local e = math.max(cur + 1, tonumber(ARGV[8]))
redis.call('HSET', KEYS[4], f, e)
local rec = {g = ARGV[3], i = ARGV[4], s = ARGV[5], n = ARGV[6], e = e, t = ARGV[7]}
redis.call('HSET', KEYS[3], f, cjson.encode(rec))
publish({op = 'set', f = f, r = rec})
return e
`;

/**
 * assert(channel, field, gw, incarnation, sessionId, instanceId, since, epoch) → {1, epoch} | {0, storedEpoch, recordJson}
 * Re-writes a live local session after a reconnect or a lapsed lease: a fenced write. It loses when the
 * epoch counter is above the session's epoch (a newer claim happened, even if since released) or another
 * session's record holds an epoch at least as high. If the stored record is already this session's, its
 * epoch is adopted (a claim whose reply was lost may have landed). The counter is raised to the epoch
 * (after a restart without persistence it may have been reset). Writes and publishes only on a change.
 */
const ASSERT = `
local f, gw, sid = ARGV[2], ARGV[3], ARGV[5]
local e = tonumber(ARGV[8])
local raw = redis.call('HGET', KEYS[3], f)
local r = raw and cjson.decode(raw)
local cur = tonumber(redis.call('HGET', KEYS[4], f) or '0')
local mine = r and r.s == sid and r.g == gw
if mine then e = math.max(e, tonumber(r.e)) end
if cur > e or (r and (not mine) and tonumber(r.e) >= e) then return {0, cur, raw or ''} end
if cur < e then redis.call('HSET', KEYS[4], f, e) end
if mine and tonumber(r.e) == e and r.i == ARGV[4] and r.n == ARGV[6] and r.t == ARGV[7] then return {1, e, ''} end
local rec = {g = gw, i = ARGV[4], s = sid, n = ARGV[6], e = e, t = ARGV[7]}
redis.call('HSET', KEYS[3], f, cjson.encode(rec))
publish({op = 'set', f = f, r = rec})
return {1, e, ''}
`;

/**
 * release(channel, field, gw, sessionId) → 1 | 0
 * Remove-if-current: HDEL only when the stored record is this gateway's and this session's. A stale
 * cleanup (a gateway that was paused while the supervisor moved) finds another session there and leaves
 * it. The epoch counter stays, so the next claim still gets a higher epoch.
 */
const RELEASE = `
local f = ARGV[2]
local raw = redis.call('HGET', KEYS[3], f)
if not raw then return 0 end
local r = cjson.decode(raw)
if r.g ~= ARGV[3] or r.s ~= ARGV[4] then return 0 end
redis.call('HDEL', KEYS[3], f)
publish({op = 'del', f = f, s = r.s})
return 1
`;

/**
 * collect(channel, callerGw, [field, sessionId, epoch]...) → number removed
 * Garbage collection after a full scan: deletes each named record (HDEL) if it is still exactly that
 * session at that epoch and its lease is not live (expired, or written under an older incarnation), or
 * it is the caller's own orphan. Re-checking liveness here makes it safe against a gateway that
 * re-asserted between the scan and this call.
 */
const COLLECT = `
local now = now_ms()
local gone = {}
for j = 3, #ARGV, 3 do
  local f = ARGV[j]
  local raw = redis.call('HGET', KEYS[3], f)
  if raw then
    local r = cjson.decode(raw)
    if r.s == ARGV[j + 1] and tonumber(r.e) == tonumber(ARGV[j + 2]) and (r.g == ARGV[2] or not lease_live(r.g, r.i, now)) then
      redis.call('HDEL', KEYS[3], f)
      gone[#gone + 1] = f
    end
  end
end
if #gone > 0 then publish({op = 'del-many', fs = gone}) end
return #gone
`;

/**
 * leave(channel, gw, incarnation, [field, sessionId]...) → number removed
 * Graceful shutdown: drops the lease (ZREM, HDEL) if this incarnation holds it, and deletes the named
 * records that are still this gateway's sessions, in one step, so peers see the sessions gone at once
 * rather than after a lease TTL.
 */
const LEAVE = `
local gw = ARGV[2]
if incarnation_of(gw) == ARGV[3] then
  redis.call('ZREM', KEYS[1], gw)
  redis.call('HDEL', KEYS[2], gw)
end
local gone = {}
for j = 4, #ARGV, 2 do
  local f = ARGV[j]
  local raw = redis.call('HGET', KEYS[3], f)
  if raw then
    local r = cjson.decode(raw)
    if r.g == gw and r.s == ARGV[j + 1] then
      redis.call('HDEL', KEYS[3], f)
      gone[#gone + 1] = f
    end
  end
end
publish({op = 'gw-down', g = gw, i = ARGV[3], fs = gone})
return #gone
`;

/**
 * snapshot(channel) → {now, version, [field, recordJson]..., [id, expiry, infoJson]...}
 * One consistent read of every record (HGETALL) and every live lease, with the version they correspond
 * to, for the mirror's start and its periodic re-scan.
 */
const SNAPSHOT = `
local now = now_ms()
local v = tonumber(redis.call('GET', KEYS[5]) or '0')
return {now, v, redis.call('HGETALL', KEYS[3]), live_gateways(now)}
`;

export interface LuaScript {
  readonly name: string;
  readonly lua: string;
  readonly sha: string;
}

function script(name: string, body: string): LuaScript {
  const lua = PRELUDE + body;
  return { name, lua, sha: createHash('sha1').update(lua).digest('hex') };
}

export const SCRIPTS = {
  renew: script('renew', RENEW),
  claim: script('claim', CLAIM),
  assert: script('assert', ASSERT),
  release: script('release', RELEASE),
  collect: script('collect', COLLECT),
  leave: script('leave', LEAVE),
  snapshot: script('snapshot', SNAPSHOT),
} as const;

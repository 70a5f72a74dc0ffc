import { createHash } from 'node:crypto';

/**
 * The Lua scripts of the Redis presence store (docs/presence.md, "Scripts"). Each runs atomically on the
 * server (EVAL), so a check and the write it guards cannot interleave with another gateway's.
 *
 * Presence is split into S shards (`--presence-shards`, docs/presence.md "Shards"): a sandbox lives in shard
 * shardOf("namespace/name", S). Every script declares the same six keys, all keys of ONE shard under one
 * hash tag (shard 0: `{prefix}`, the tag of an unsharded deployment; shard k ≥ 1: `{prefix:k}`), so on Redis
 * Cluster a shard's keys live in one slot and a script may touch them all (Cluster rejects scripts whose
 * keys span slots). Each shard holds its own copy of every gateway lease, so a script checks leases
 * atomically with the records of its shard. The pub/sub channel (one per shard) is passed as ARGV[1]:
 * channels are not keys.
 *
 *   KEYS[1] {p}:gateways      sorted set: gateway id → lease expiry (Redis TIME, ms)
 *   KEYS[2] {p}:gateway-info  hash: gateway id → JSON {i: incarnation, a: {attributes}, t: synced term,
 *                             k: shard count}
 *   KEYS[3] {p}:presence      hash: "namespace/name" → JSON record {g, i, s, n, e, t}
 *   KEYS[4] {p}:epochs        hash: "namespace/name" → the sandbox's epoch counter (never decreases)
 *   KEYS[5] {p}:version       string: a counter bumped by every published change
 *   KEYS[6] {p}:term          hash: t term number, r the replication id of the master it belongs to,
 *                             s "1" once every replica has it, o the replication offset it must reach
 *
 * Records: g gateway id, i the gateway's incarnation (a record counts only while the lease it was written
 * under is the live one), s session id, n supervisor instance id, e epoch and t accepted-at ms (both
 * strings, so cjson's 14-digit number format cannot round them).
 *
 * Terms (docs/presence.md, "Failover"): a master's term is bound to its replication id, which a promoted
 * replica (or a restarted empty server) changes, so the first script after a failover sees a stored term
 * that is not this master's and a new, higher term is adopted. Every epoch a claim hands out is at least
 * term × 2^32 + 1, so epochs of a new term are above every epoch of the old one even when the promoted
 * replica lost the old master's last increments. A claim is refused (-1) until the term is sealed: its
 * adoption has reached every replica, so no later failover can forget it and hand out the same term again.
 */

export interface PresenceKeys {
  readonly gateways: string;
  readonly gatewayInfo: string;
  readonly presence: string;
  readonly epochs: string;
  readonly version: string;
  readonly term: string;
  readonly channel: string;
}

/**
 * Key names of one shard: one hash tag, so every key of the shard hashes to the same Cluster slot. Shard 0
 * keeps the unsharded names (`{prefix}:…`), so gateways of any shard count meet there and a mismatch is
 * seen (the renew script compares the shard count in each live lease).
 */
export function presenceKeys(prefix: string, shard = 0): PresenceKeys {
  const tag = shard === 0 ? `{${prefix}}` : `{${prefix}:${shard}}`;
  return {
    gateways: `${tag}:gateways`,
    gatewayInfo: `${tag}:gateway-info`,
    presence: `${tag}:presence`,
    epochs: `${tag}:epochs`,
    version: `${tag}:version`,
    term: `${tag}:term`,
    channel: `${tag}:presence-changes`,
  };
}

/** The keys in the order every script declares them. */
export function scriptKeys(k: PresenceKeys): string[] {
  return [k.gateways, k.gatewayInfo, k.presence, k.epochs, k.version, k.term];
}

/**
 * The shard of a sandbox ("namespace/name"): 32-bit FNV-1a over the UTF-8 bytes, modulo the shard count.
 * Stable across processes, versions and platforms, because every gateway must agree on it.
 */
export function shardOf(field: string, shards: number): number {
  if (shards === 1) return 0;
  let h = 0x811c9dc5;
  // get() calls this on every routed read: hash the UTF-16 code units as their UTF-8 bytes, no Buffer.
  for (let i = 0; i < field.length; i++) {
    let c = field.charCodeAt(i);
    if (c < 0x80) {
      h = Math.imul(h ^ c, 0x01000193) >>> 0;
      continue;
    }
    if (c >= 0xd800 && c < 0xdc00 && i + 1 < field.length) {
      const lo = field.charCodeAt(i + 1);
      if (lo >= 0xdc00 && lo < 0xe000) {
        c = 0x10000 + ((c - 0xd800) << 10) + (lo - 0xdc00);
        i++;
      }
    }
    // A lone surrogate encodes as U+FFFD, as Buffer.from(…, 'utf8') does.
    if (c >= 0xd800 && c < 0xe000) c = 0xfffd;
    const bytes = c < 0x800 ? [0xc0 | (c >> 6), 0x80 | (c & 0x3f)] : c < 0x10000 ? [0xe0 | (c >> 12), 0x80 | ((c >> 6) & 0x3f), 0x80 | (c & 0x3f)] : [0xf0 | (c >> 18), 0x80 | ((c >> 12) & 0x3f), 0x80 | ((c >> 6) & 0x3f), 0x80 | (c & 0x3f)];
    for (const b of bytes) h = Math.imul(h ^ b, 0x01000193) >>> 0;
  }
  return h % shards;
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
local function fmt(n)
  return string.format('%d', n)
end
local function replication()
  return redis.call('INFO', 'replication')
end
-- The stored term if it is this master's (bound to its replication id), and whether it is sealed.
local function current_term(info)
  local h = redis.call('HMGET', KEYS[6], 't', 'r', 's')
  if h[1] and h[2] == string.match(info, 'master_replid:(%x+)') then return tonumber(h[1]), h[3] == '1' end
  return nil, false
end
-- Deletes each named record ARGV[j] (j = 4, 4 + stride, …) that doomed(record, j) accepts, and returns
-- the fields deleted: collect and leave differ only in the test and in how many ARGV each record takes.
local function delete_records(stride, doomed)
  local gone = {}
  for j = 4, #ARGV, stride do
    local f = ARGV[j]
    local raw = redis.call('HGET', KEYS[3], f)
    if raw and doomed(cjson.decode(raw), j) then
      redis.call('HDEL', KEYS[3], f)
      gone[#gone + 1] = f
    end
  end
  return gone
end
`;

/** Epochs of term t start at t × 2^32 + 1: 2^32 claims per sandbox per term, 2^21 terms within 2^53. */
export const TERM_SPAN = 2 ** 32;

/**
 * renew(channel, gw, incarnation, ttlMs, infoJson, forgetAfterMs, shards) →
 *   {now, lapsed, usurped, version, [id, expiry, infoJson]..., shards, term}
 * Extends this gateway's lease to TIME + ttl (ZADD) and stores its info (HSET). `lapsed` = the lease was
 * absent, expired or held by another incarnation, so records may have been collected and the caller must
 * re-assert its sessions; that is also published so peers start counting this gateway's records, and so
 * is a change of the info (a gateway announces there the term it has re-asserted its sessions in). `term`
 * is this master's stored term, or -1 when the stored term belongs to another master (a failover the
 * client has not noticed yet: a Cluster replica promoted behind the same connection).
 * `usurped` = another live process holds the same gateway id (a misconfiguration). Leases expired longer
 * than forgetAfterMs are dropped (ZREM, HDEL). Touches no session record: its cost grows with gateways.
 * `shards` is the caller's shard count, or, when another live gateway's lease names a different one (`k`
 * in its info; absent: 1), that count, and nothing is written: the caller's sandboxes would hash to other
 * shards than its peers'. A fleet restarted with a new count has no live lease left to disagree with.
 */
const RENEW = `
local gw, inc, ttl = ARGV[2], ARGV[3], tonumber(ARGV[4])
local now = now_ms()
local shards = tonumber(ARGV[7])
-- The live leases are read once: checked for the shard count here, returned below (with this gateway's
-- own entry as written now).
local live = live_gateways(now)
local own
for j = 1, #live, 3 do
  if live[j] == gw then
    own = j
  else
    -- A value that is not our JSON (or a k that is not a count) says nothing about the layout: skip it
    -- rather than let one bad field fail every gateway's renewal in this shard.
    local k = shards
    local ok, o = pcall(cjson.decode, live[j + 2])
    if ok and type(o) == 'table' then
      k = o.k == nil and 1 or tonumber(o.k)
      if k == nil or k < 1 or k % 1 ~= 0 then k = shards end
    end
    if k ~= shards then return {now, 0, 0, 0, {}, k, -1} end
  end
end
local prev_inc = own and live[own + 2] ~= '' and cjson.decode(live[own + 2]).i
local lapsed = (not own) or prev_inc ~= inc
local usurped = own and prev_inc ~= inc
local exp = now + ttl
local info_changed = (own and live[own + 2] or redis.call('HGET', KEYS[2], gw)) ~= ARGV[5]
redis.call('ZADD', KEYS[1], exp, gw)
redis.call('HSET', KEYS[2], gw, ARGV[5])
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[6]))
for _, id in ipairs(old) do
  redis.call('ZREM', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
end
if lapsed or info_changed then publish({op = 'gw', g = gw, x = exp, n = now, info = ARGV[5]}) end
if not own then own = #live + 1 end
live[own], live[own + 1], live[own + 2] = gw, fmt(exp), ARGV[5]
local v = tonumber(redis.call('GET', KEYS[5]) or '0')
local t = current_term(replication())
return {now, lapsed and 1 or 0, usurped and 1 or 0, v, live, shards, t or -1}
`;

/**
 * claim(channel, field, gw, incarnation, sessionId, instanceId, since, minEpoch, term) → epoch | -1
 * A new session: epoch = max(stored + 1, minEpoch, term × 2^32 + 1) (HGET/HSET on the epochs hash: the
 * counter survives the record), then the record is written (HSET) and published. minEpoch is the highest
 * epoch the gateway has seen for the sandbox plus one, which raises a counter that a Redis restart
 * without persistence reset; the term floor does the same after a failover to a replica that lost
 * increments. -1 (nothing written): `term` is not this master's sealed term; adopt the term, then retry.
 */
const CLAIM = `
local t, sealed = current_term(replication())
if t ~= tonumber(ARGV[9]) or not sealed then return -1 end
local f = ARGV[2]
local cur = tonumber(redis.call('HGET', KEYS[4], f) or '0')
local e = math.max(cur + 1, tonumber(ARGV[8]), t * ${TERM_SPAN} + 1)
redis.call('HSET', KEYS[4], f, fmt(e))
local rec = {g = ARGV[3], i = ARGV[4], s = ARGV[5], n = ARGV[6], e = fmt(e), t = ARGV[7]}
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
if cur < e then redis.call('HSET', KEYS[4], f, fmt(e)) end
if mine and tonumber(r.e) == e and r.i == ARGV[4] and r.n == ARGV[6] and r.t == ARGV[7] then return {1, e, ''} end
local rec = {g = gw, i = ARGV[4], s = sid, n = ARGV[6], e = fmt(e), t = ARGV[7]}
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
 * collect(channel, callerGw, term, [field, sessionId, epoch]...) → number removed | -1
 * Garbage collection after a full scan: deletes each named record (HDEL) if it is still exactly that
 * session at that epoch and its lease is not live (expired, or written under an older incarnation), or
 * it is the caller's own orphan. Re-checking liveness here makes it safe against a gateway that
 * re-asserted between the scan and this call. -1 (nothing deleted): `term` is not this master's term. A
 * promoted replica may not hold a live peer's lease yet (the peer has not reached it): only a caller that
 * has adopted the new term, and so granted its peers their grace, may judge which records are orphans.
 */
const COLLECT = `
if current_term(replication()) ~= tonumber(ARGV[3]) then return -1 end
local now = now_ms()
local gone = delete_records(3, function(r, j)
  return r.s == ARGV[j + 1] and tonumber(r.e) == tonumber(ARGV[j + 2]) and (r.g == ARGV[2] or not lease_live(r.g, r.i, now))
end)
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
local gone = delete_records(2, function(r, j) return r.g == gw and r.s == ARGV[j + 1] end)
publish({op = 'gw-down', g = gw, i = ARGV[3], fs = gone})
return #gone
`;

/**
 * term(channel, minTerm) → {term, sealed, replicas}
 * Adopts this master's term: the stored one if it is bound to this master's replication id (INFO
 * replication, master_replid), else a new one, max(stored + 1, minTerm), bound to it and not yet sealed.
 * minTerm is one above the highest term the gateway has seen, which lifts a term that a restart without
 * persistence reset. `replicas` is the number of connected replicas (the client's WAIT target). Refused
 * on a replica: a demoted master must not start a term.
 */
const TERM = `
local info = replication()
if not string.find(info, 'role:master', 1, true) then return redis.error_reply('READONLY presence terms are adopted on the master only') end
local t, sealed = current_term(info)
if not t then
  t = math.max(tonumber(redis.call('HGET', KEYS[6], 't') or '-1') + 1, tonumber(ARGV[2]))
  redis.call('HSET', KEYS[6], 't', fmt(t), 'r', string.match(info, 'master_replid:(%x+)'), 's', '0', 'o', '-1')
end
return {t, sealed and 1 or 0, tonumber(string.match(info, 'connected_slaves:(%d+)') or '0')}
`;

/**
 * seal(channel, term) → 1 sealed | 0 not yet | -1 not this master's term
 * A term is sealed once every replica has acknowledged the replication offset that followed its adoption
 * (INFO replication: each replica's `state=online` and acknowledged `offset`). The first call records the
 * offset to reach; replicas acknowledge once a second, or at once when the client sends WAIT.
 */
const SEAL = `
local info = replication()
local t, sealed = current_term(info)
if t ~= tonumber(ARGV[2]) then return -1 end
if sealed then return 1 end
local want = tonumber(redis.call('HGET', KEYS[6], 'o') or '-1')
if want < 0 then
  want = tonumber(string.match(info, 'master_repl_offset:(%d+)'))
  redis.call('HSET', KEYS[6], 'o', fmt(want))
end
for line in string.gmatch(info, 'slave%d+:([^\\r\\n]+)') do
  local off = tonumber(string.match(line, 'offset=(%d+)') or '-1')
  if string.match(line, 'state=(%a+)') ~= 'online' or off < want then return 0 end
end
redis.call('HSET', KEYS[6], 's', '1')
return 1
`;

/**
 * snapshot(channel, term) → {now, version, [field, recordJson]..., [id, expiry, infoJson]...} | -1
 * One consistent read of every record (HGETALL) and every live lease, with the version they correspond
 * to, for the mirror's start and its periodic re-scan. -1 (nothing read): `term` is not this master's
 * term, so what it holds belongs to a term the mirror has not adopted (a failover behind the same
 * connection: its leases would drop peers that have not reached the new master yet).
 */
const SNAPSHOT = `
if current_term(replication()) ~= tonumber(ARGV[2]) then return -1 end
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
  term: script('term', TERM),
  seal: script('seal', SEAL),
} as const;

import { createConnection } from 'node:net';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { Redis } from 'ioredis';
import { createLogger, MemoryLogSink } from '../../src/observability/logger.js';
import type { PresenceRecord } from '../../src/sessions/presence/presence-store.js';
import { type RedisPresence, type RedisPresenceOptions } from '../../src/sessions/presence/redis-presence.js';
import { PresenceStores } from '../helpers/presence-stores.js';
import { SandgateError } from '../../src/domain/errors.js';
import { presenceKeys, SCRIPTS, shardOf } from '../../src/sessions/presence/redis-scripts.js';
import { eventually } from '../helpers/eventually.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

// Two gateways (A and B) in one process, each with its own Redis connections, against a private
// redis-server. Lease TTLs are short so expiry is observed in well under a second. The core suite runs
// unsharded and with presence split into four shards (--presence-shards 4).

const TTL = 450;

let server: RedisServer;
let admin: Redis;
let prefix = '';
let shards = 1;
let n = 0;
let sink: MemoryLogSink;
const stores = new PresenceStores(() => ({ url: server.url, leaseTtlMs: TTL, rescanMs: 60_000, keyPrefix: prefix, shards, log: createLogger('debug', sink) }));

beforeAll(async () => {
  server = await startRedisServer();
  admin = server.admin();
});
afterAll(async () => {
  await server.stop();
});
beforeEach(() => {
  prefix = `presence-${++n}`;
  sink = new MemoryLogSink();
});
afterEach(async () => {
  await stores.closeAll();
});

const make = (gatewayId: string, o: Partial<RedisPresenceOptions> = {}): RedisPresence => stores.make(gatewayId, o);
const started = (gatewayId: string, o: Partial<RedisPresenceOptions> = {}): Promise<RedisPresence> => stores.started(gatewayId, o);

const claim = (s: RedisPresence, sessionId: string, name = 'sb'): Promise<PresenceRecord> => s.claim('ns', name, { sessionId, instanceId: `inst-${sessionId}`, since: 1_700_000_000_123 });

/**
 * Resolves once `store`'s presence of ns/name satisfies `pred` (checked now and on every change). The
 * timeout only guards against a hang; no test reads how long it took.
 */
function presenceBecomes(store: RedisPresence, pred: (r: PresenceRecord | undefined) => boolean, name = 'sb', timeoutMs = 10_000): Promise<void> {
  return new Promise((resolve, reject) => {
    if (pred(store.get('ns', name))) return resolve();
    const timer = setTimeout(() => {
      off();
      reject(new Error(`presence of ns/${name} on ${store.gatewayId} did not change as expected; now ${JSON.stringify(store.get('ns', name))}`));
    }, timeoutMs);
    const off = store.onChange((ns, nm, r) => {
      if (ns !== 'ns' || nm !== name || !pred(r)) return;
      clearTimeout(timer);
      off();
      resolve();
    });
  });
}

const heldBy = (sessionId: string) => (r: PresenceRecord | undefined) => r?.sessionId === sessionId;
const absent = (r: PresenceRecord | undefined): boolean => r === undefined;

/** The keys of the shard holding `field`. */
const keysOf = (field: string): ReturnType<typeof presenceKeys> => presenceKeys(prefix, shardOf(field, shards));

async function storedSession(field = 'ns/sb'): Promise<string | undefined> {
  const raw = await admin.hget(keysOf(field).presence, field);
  return raw === null ? undefined : (JSON.parse(raw) as { s: string }).s;
}

describe.each([1, 4])('RedisPresence between two gateways, %i shard(s)', (S) => {
  beforeEach(() => {
    shards = S;
  });

  it("a claim on B shows in A's mirror, with B's gateway info", async () => {
    const a = await started('A');
    const b = await started('B', { gatewayInfo: { relay: '10.0.0.2:7000' } });
    const seen: (PresenceRecord | undefined)[] = [];
    a.onChange((_ns, _name, r) => seen.push(r));
    const rec = await claim(b, 's1');
    expect(rec).toEqual({ namespace: 'ns', name: 'sb', gatewayId: 'B', sessionId: 's1', instanceId: 'inst-s1', epoch: 1, since: 1_700_000_000_123 });
    await presenceBecomes(a, heldBy('s1'));
    expect(a.get('ns', 'sb')).toEqual(rec);
    expect([...a.list()]).toEqual([rec]);
    expect(seen).toEqual([rec]);
    expect(a.gatewayInfo('B')).toEqual({ relay: '10.0.0.2:7000' });
    // The console's gateways view: B's live lease with what it published and how long it has left.
    const leaseB = a.gatewayLeases().find((l) => l.gatewayId === 'B');
    expect(leaseB?.info).toEqual({ relay: '10.0.0.2:7000' });
    expect(leaseB!.expiresInMs).toBeGreaterThan(0);
    expect(leaseB!.expiresInMs).toBeLessThanOrEqual(TTL);
    expect(a.degraded()).toEqual([]);
  });

  it("a failover behind the same connection that a scan meets before any renewal: the peer's session stays visible and is not collected", async () => {
    // Renewals every 10 s, scans every 30 ms: the next command A sends the shard is a scan.
    const a = await started('A', { leaseTtlMs: 30_000, rescanMs: 30 });
    const b = await started('B', { leaseTtlMs: 30_000, rescanMs: 60_000 });
    const rec = await claim(b, 's1');
    await presenceBecomes(a, heldBy('s1'));
    const shard = shardOf('ns/sb', S);
    const dropped = vi.fn();
    a.onChange((_ns, name, r) => name === 'sb' && r === undefined && dropped());
    // A replica promoted behind both connections: another replication id, and B has not renewed on it yet.
    await admin.multi().hset(keysOf('ns/sb').term, 'r', 'f'.repeat(40)).zrem(keysOf('ns/sb').gateways, 'B').exec();
    // Several scans (each one EVALSHA; nothing else runs on this server meanwhile). The first is refused in
    // the old term; A adopts the new one, which grants B a lease's grace to reach the new master.
    const scripts = async (): Promise<number> => Number(/cmdstat_evalsha:calls=(\d+)/.exec(await admin.info('commandstats'))?.[1] ?? 0);
    const before = await scripts();
    // A's work rounds run one at a time, each at most two scripts per shard (a term adoption, a scan), and
    // B renews once in 10 s: past 6·S more scripts, A has handled three whole rounds' replies, where a
    // drop would have shown.
    await eventually(async () => (await scripts()) - before > 6 * S, 10_000, 'three more rounds of scans on A');
    expect(dropped).not.toHaveBeenCalled();
    expect(a.get('ns', 'sb')).toEqual(rec);
    expect(await admin.hget(keysOf('ns/sb').presence, 'ns/sb')).toContain('"s":"s1"');
    expect(a.terms()[shard]).toBe(1);
  });

  it('a gateway started later loads existing presence by scan', async () => {
    const b = await started('B');
    await claim(b, 's1');
    const a = await started('A');
    expect(a.get('ns', 'sb')?.sessionId).toBe('s1');
  });

  it("B's lease lapses (no renewal, no release) → A drops B's sessions once the lease has run out, not before", async () => {
    const a = await started('A');
    const b = await started('B');
    await claim(b, 's1');
    await presenceBecomes(a, heldBy('s1'));
    await b.close({ release: false });
    await presenceBecomes(a, absent);
    // Read at once after A dropped the session: B's lease is still stored (nobody released it), and by
    // Redis's own clock it had already expired — A did not give up on a live lease.
    const [sec, micro] = await admin.time();
    const lease = await admin.zscore(keysOf('ns/sb').gateways, 'B');
    expect(lease).not.toBeNull();
    expect(Number(lease)).toBeLessThanOrEqual(Number(sec) * 1000 + Math.floor(Number(micro) / 1000));
    // B's address goes once its lease has lapsed in every shard's mirror (each copy has its own expiry).
    await eventually(() => a.gatewayInfo('B') === undefined, 5000, "B's info to go");
    expect(a.gatewayLeases().map((l) => l.gatewayId)).not.toContain('B');
  });

  it('graceful close({release: true}) removes B at once: its lease is deleted, not left to expire', async () => {
    const a = await started('A', { leaseTtlMs: 60_000 });
    const b = await started('B', { leaseTtlMs: 60_000 });
    await claim(b, 's1');
    await presenceBecomes(a, heldBy('s1'));
    await b.close({ release: true });
    // With a 60 s lease, only B's leave (the lease deleted and the change published) can drop it within
    // the wait's guard.
    await presenceBecomes(a, absent);
    expect(await admin.zscore(presenceKeys(prefix, 0).gateways, 'B')).toBeNull();
    expect(a.gatewayInfo('B')).toBeUndefined();
    expect(await storedSession()).toBeUndefined();
  });

  it("a newer claim on B supersedes A's session: A is told (onLost) and a stale release leaves B's record", async () => {
    const a = await started('A');
    const b = await started('B');
    const lost: PresenceRecord[] = [];
    a.onLost((r) => lost.push(r));
    const first = await claim(a, 's1');
    await presenceBecomes(b, heldBy('s1'));
    const second = await claim(b, 's2');
    expect(second.epoch).toBe(first.epoch + 1);
    await presenceBecomes(a, heldBy('s2'));
    expect(lost).toEqual([first]);
    expect(await a.release('ns', 'sb', 's1')).toBe(false);
    expect(await storedSession()).toBe('s2');
    expect(b.get('ns', 'sb')).toEqual(second);
  });

  it('release is remove-if-current: a stale session id does not remove the newer session', async () => {
    const a = await started('A');
    const b = await started('B');
    await claim(a, 's1');
    const newer = await claim(a, 's2');
    await presenceBecomes(b, heldBy('s2'));
    expect(await a.release('ns', 'sb', 's1')).toBe(false);
    expect(a.get('ns', 'sb')).toEqual(newer);
    expect(await storedSession()).toBe('s2');
    expect(await a.release('ns', 'sb', 's2')).toBe(true);
    await presenceBecomes(b, absent);
    expect(await storedSession()).toBeUndefined();
  });

  it('epochs only grow, across gateways and across release', async () => {
    const a = await started('A');
    const b = await started('B');
    const epochs: number[] = [];
    for (const [s, id] of [[a, 'x1'], [b, 'x2'], [a, 'x3']] as const) {
      epochs.push((await claim(s, id)).epoch);
      await s.release('ns', 'sb', id);
    }
    expect(epochs).toEqual([1, 2, 3]);
  });

  it('a missed pub/sub message is healed by the renewal that sees the change counter move (not the re-scan)', async () => {
    // No periodic re-scan within the test: only the counter check at a renewal can notice.
    const a = await started('A', { rescanMs: 3_600_000 });
    const b = await started('B');
    await claim(b, 'real');
    await presenceBecomes(a, heldBy('real'), 'sb');
    const k = keysOf('ns/sb');
    // A change that bumped the counter but whose message never arrived (as if published while A's
    // subscriber was reconnecting): the record is gone. (A record written for B instead would race with
    // B's own collection of it: B rightly deletes a record in its name that is none of its sessions.)
    await admin.hdel(k.presence, 'ns/sb');
    await admin.incr(k.version);
    await presenceBecomes(a, absent, 'sb');
  });

  it('a write that bypassed the scripts entirely is healed by the periodic re-scan', async () => {
    const a = await started('A', { rescanMs: 300 });
    const b = await started('B');
    await claim(b, 'real');
    await presenceBecomes(a, heldBy('real'));
    const inc = JSON.parse((await admin.hget(keysOf('ns/sb').presence, 'ns/sb'))!).i as string;
    await admin.hset(keysOf('ns/other').presence, 'ns/other', JSON.stringify({ g: 'B', i: inc, s: 'ghost', n: 'i', e: 1, t: '5' }));
    await admin.hdel(keysOf('ns/sb').presence, 'ns/sb');
    await presenceBecomes(a, heldBy('ghost'), 'other', 1500);
    await presenceBecomes(a, absent, 'sb', 1500);
  });

  // Starts like the lapsed-lease test above (B claims, A mirrors it, B goes without releasing); what B
  // does next — come back as a new incarnation of the same id — is the case.
  it("a restarted gateway with the same id does not resurrect its previous incarnation's records", async () => {
    const a = await started('A');
    const b1 = await started('B');
    await claim(b1, 'old');
    await presenceBecomes(a, heldBy('old'));
    await b1.close({ release: false });
    await presenceBecomes(a, absent, 'sb', TTL * 4);
    const b2 = await started('B');
    expect(b2.get('ns', 'sb')).toBeUndefined();
    // The new incarnation's start-up scan collected the record its predecessor left behind.
    expect(await storedSession()).toBeUndefined();
    await presenceBecomes(a, absent);
  });

  it("renewal cost follows gateways, not sessions: 200 idle sessions add no Redis commands", async () => {
    const a = await started('A', { leaseTtlMs: 300 });
    const b = await started('B', { leaseTtlMs: 300 });
    /** Redis commands per script call over the next dozen renewals (only renewals run while sessions are idle). */
    const perRenewal = async (): Promise<number> => {
      await admin.config('RESETSTAT');
      const counts = new Map<string, number>();
      await eventually(
        async () => {
          counts.clear();
          for (const m of (await admin.info('commandstats')).matchAll(/^cmdstat_(\w+):calls=(\d+)/gm)) counts.set(m[1]!, Number(m[2]));
          return (counts.get('evalsha') ?? 0) >= 12 * S;
        },
        10_000,
        'a dozen renewals per shard',
      );
      let commands = 0;
      for (const [name, calls] of counts) if (name !== 'info' && name !== 'config' && name !== 'evalsha') commands += calls;
      return commands / counts.get('evalsha')!;
    };
    const idle = await perRenewal();
    for (let i = 0; i < 100; i++) {
      await claim(a, `a${i}`, `a${i}`);
      await claim(b, `b${i}`, `b${i}`);
    }
    await presenceBecomes(a, heldBy('b99'), 'b99');
    const loaded = await perRenewal();
    // The renew script touches leases and the change counter, never a session record: about the same
    // commands per renewal with 200 sessions as with none (a renewal varies by a command or two — a
    // lease info written or a lapsed peer dropped — where reading the sessions would add hundreds).
    expect(idle).toBeGreaterThan(0);
    expect(loaded).toBeLessThanOrEqual(idle + 3);
  });

  it('get() and list() never call Redis', async () => {
    const a = await started('A');
    await claim(a, 's1');
    const before = (await admin.info('stats')).match(/total_commands_processed:(\d+)/)![1];
    let hits = 0;
    for (let i = 0; i < 10_000; i++) if (a.get('ns', 'sb') !== undefined && [...a.list()].length === 1) hits++;
    const after = (await admin.info('stats')).match(/total_commands_processed:(\d+)/)![1];
    expect(hits).toBe(10_000);
    // Only the INFO calls themselves and any background renewal that fell in between, not 20,000 reads.
    expect(Number(after) - Number(before)).toBeLessThan(50 * S);
  });

  it('a throwing listener is logged and does not stop the others', async () => {
    const a = await started('A');
    const b = await started('B');
    a.onChange(() => {
      throw new Error('listener bug');
    });
    const ok = presenceBecomes(a, heldBy('s1'));
    await claim(b, 's1');
    await ok;
    expect(sink.find((l) => l.msg === 'presence change listener failed')).toBeDefined();
  });
});

describe('RedisPresence split into shards', () => {
  beforeEach(() => {
    shards = 4;
  });

  it('spreads sandboxes over the shards by hash; each shard has its own lease copy, term and change counter', async () => {
    const a = await started('A');
    const b = await started('B');
    const names = Array.from({ length: 40 }, (_, i) => `sb${i}`);
    for (const name of names) await claim(a, `s-${name}`, name);
    await presenceBecomes(b, heldBy('s-sb39'), 'sb39');
    const perShard = await Promise.all([0, 1, 2, 3].map((k) => admin.hkeys(presenceKeys(prefix, k).presence)));
    for (const [k, fields] of perShard.entries()) {
      // 40 sandboxes over 4 shards: every shard gets some, and each sandbox is in the shard its hash names.
      expect(fields.length).toBeGreaterThan(0);
      for (const f of fields) expect(shardOf(f, 4)).toBe(k);
      expect(await admin.zscore(presenceKeys(prefix, k).gateways, 'B')).not.toBeNull();
      expect(await admin.hget(presenceKeys(prefix, k).term, 't')).toBe('0');
      expect(Number(await admin.get(presenceKeys(prefix, k).version))).toBeGreaterThanOrEqual(fields.length);
    }
    expect(perShard.flat().sort()).toEqual(names.map((x) => `ns/${x}`).sort());
    // Shard 0 keeps the unsharded key names; the others carry their index in the hash tag.
    expect(presenceKeys(prefix, 0).presence).toBe(`{${prefix}}:presence`);
    expect(presenceKeys(prefix, 3).presence).toBe(`{${prefix}:3}:presence`);
    expect([...b.list()]).toHaveLength(40);
    expect(a.terms()).toEqual([0, 0, 0, 0]);
  });

  it('a counter jump in one shard rescans that shard only', async () => {
    const a = await started('A');
    const b = await started('B');
    await claim(b, 'real');
    await presenceBecomes(a, heldBy('real'));
    // MONITOR shows the commands scripts run, with their keys (read raw: one line per command).
    const monitor = createConnection({ host: '127.0.0.1', port: server.port });
    let scanned: string[] = [];
    let lastScanAt = Date.now();
    let pending = '';
    monitor.on('data', (chunk: Buffer) => {
      pending += chunk.toString('utf8');
      const lines = pending.split('\r\n');
      pending = lines.pop()!;
      for (const line of lines) {
        const m = /"hgetall" "([^"]+)"/i.exec(line);
        if (m === null) continue;
        scanned.push(m[1]!);
        lastScanAt = Date.now();
      }
    });
    await new Promise<void>((resolve) => monitor.once('data', () => resolve()).write('MONITOR\r\n'));
    try {
      // Start-up is over once no scan has run for two renewal periods (each gateway rescans a shard once
      // more when the other announces, in that shard, that it has re-asserted its sessions).
      await eventually(() => Date.now() - lastScanAt > (2 * TTL) / 3, 5000, 'the start-up scans to end');
      scanned = [];
      const k = keysOf('ns/sb');
      // A change in ns/sb's shard whose message never arrived (see the missed-message test above).
      await admin.hdel(k.presence, 'ns/sb');
      await admin.incr(k.version);
      await presenceBecomes(a, absent);
      await eventually(() => scanned.includes(k.presence), 3000, "MONITOR's line for the rescan");
      expect(new Set(scanned)).toEqual(new Set([k.presence]));
    } finally {
      monitor.destroy();
    }
  });

  it("a peer missing from one shard's mirror: its sandboxes there vanish, its relay address still serves those elsewhere", async () => {
    const a = await started('A');
    // B renews once a minute: nothing puts its lease back in the emptied shard during the test.
    const b = await started('B', { leaseTtlMs: 60_000, gatewayInfo: { relay: '10.0.0.2:7000' } });
    const names = Array.from({ length: 20 }, (_, i) => `sb${i}`);
    const gone = names[0]!;
    const kept = names.find((x) => shardOf(`ns/${x}`, 4) !== shardOf(`ns/${gone}`, 4))!;
    await claim(b, 's-gone', gone);
    await claim(b, 's-kept', kept);
    await presenceBecomes(a, heldBy('s-gone'), gone);
    await presenceBecomes(a, heldBy('s-kept'), kept);
    // B's lease disappears from the shard of `gone` only (as if that shard's copy had lapsed): A's next
    // renewal there drops it, and with it B's records in that shard (the per-shard lease check is the fence).
    const k = presenceKeys(prefix, shardOf(`ns/${gone}`, 4));
    await admin.zrem(k.gateways, 'B');
    await admin.hdel(k.gatewayInfo, 'B');
    await presenceBecomes(a, absent, gone);
    // The relay lookup still finds B for the sandbox in a shard where its lease is live.
    expect(a.get('ns', kept)?.sessionId).toBe('s-kept');
    expect(a.gatewayInfo('B')).toEqual({ relay: '10.0.0.2:7000' });
    expect(a.gatewayLeases().map((l) => l.gatewayId)).toContain('B');
  });

  it("renewals go on while a scan is blocked and while one shard's renewal hangs", async () => {
    await started('A', { rescanMs: 50 });
    // From here on, every scan of A's and every renewal in shard 2 waits on `gate` before it is sent.
    let open: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const held = { scans: 0, renewals: 0 };
    const evalsha = Redis.prototype.evalsha;
    const mine = new Set([0, 1, 2, 3].map((k) => presenceKeys(prefix, k).gateways));
    const spy = vi.spyOn(Redis.prototype, 'evalsha').mockImplementation(function (this: Redis, ...args: Parameters<Redis['evalsha']>) {
      // runScript sends (sha, number of keys, ...keys, ...args); every script's first key is the shard's `gateways`.
      const [sha, , firstKey] = args;
      const scan = sha === SCRIPTS.snapshot.sha && mine.has(String(firstKey));
      const renewal = sha === SCRIPTS.renew.sha && firstKey === presenceKeys(prefix, 2).gateways;
      if (!scan && !renewal) return evalsha.apply(this, args);
      held[scan ? 'scans' : 'renewals']++;
      return gate.then(() => evalsha.apply(this, args)) as ReturnType<Redis['evalsha']>;
    });
    try {
      await eventually(() => held.scans > 0 && held.renewals > 0, 5000, () => `a scan and a shard-2 renewal to be held: ${JSON.stringify(held)}`);
      // A's lease in shards 0, 1 and 3 is extended twice more (each renewal moves its expiry forward).
      const expiries = (): Promise<number[]> => Promise.all([0, 1, 3].map(async (k) => Number(await admin.zscore(presenceKeys(prefix, k).gateways, 'A'))));
      for (let round = 0; round < 2; round++) {
        const before = await expiries();
        await eventually(async () => (await expiries()).every((x, j) => x > before[j]!), 5000, () => `A's leases to be renewed past ${JSON.stringify(before)}`);
      }
      expect(held.scans).toBe(1);
      expect(held.renewals).toBe(1);
    } finally {
      spy.mockRestore();
      open();
    }
  });

  it('the shard is a stable hash of namespace/name (FNV-1a 32 mod S)', () => {
    // Fixed values: a change here moves sandboxes between shards and breaks every running fleet.
    const fields = ['ns/sb', 'ns/sb1', 'team-a/sandbox-7', 'ü/ñ'];
    expect(fields.map((f) => shardOf(f, 64))).toEqual([30, 61, 58, 31]);
    expect(fields.map((f) => shardOf(f, 64))).toEqual(fields.map((f) => fnv1a(f) % 64));
    // Every UTF-8 length, and lone surrogates (encoded as U+FFFD), hash as their UTF-8 bytes.
    const wide = ['ns/é', 'ns/€-x', 'ns/😀', 'ns/\ud800', 'ns/a\udc00b', 'ns/\ud83d', '日本/ß'];
    expect(wide.map((f) => shardOf(f, 1021))).toEqual(wide.map((f) => fnv1a(f) % 1021));
    expect(fnv1a('')).toBe(0x811c9dc5);
    expect(fnv1a('a')).toBe(0xe40c292c);
    expect(shardOf('anything', 1)).toBe(0);
  });

  it('a gateway with another shard count is refused at start with presence_shards_mismatch', async () => {
    const a = await started('A');
    await claim(a, 's1');
    for (const other of [1, 2, 8]) {
      const b = make(`B${other}`, { shards: other });
      const err = await b.start().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(SandgateError);
      expect((err as SandgateError).code).toBe('presence_shards_mismatch');
      expect((err as SandgateError).details).toEqual({ shards: other, stored: 4 });
      // It wrote nothing: no lease of its own in the shared shard 0, and A's record is untouched.
      expect(await admin.zscore(presenceKeys(prefix, 0).gateways, `B${other}`)).toBeNull();
      await b.close({ release: true });
    }
    expect(await storedSession()).toBe('s1');
    expect(sink.find((l) => String(l.msg).includes('--presence-shards is 2 here but 4'))).toBeDefined();
    // Once no live gateway disagrees (a fleet restarted with a new count), the new count is accepted.
    await a.close({ release: true });
    const c = await started('C', { shards: 2 });
    expect(c.degraded()).toEqual([]);
  });

  it('a running gateway that meets a live lease with another shard count stops writing and reports degraded until it is gone', async () => {
    const a = await started('A');
    // A peer with two shards renewing in shard 0, as if it had joined while A was cut off from Redis.
    const k0 = presenceKeys(prefix, 0);
    await admin.zadd(k0.gateways, Date.now() + 60_000, 'X');
    await admin.hset(k0.gatewayInfo, 'X', JSON.stringify({ i: 'x-inc', a: {}, t: 0, k: 2 }));
    await eventually(() => a.degraded().some((d) => d.startsWith('presence_shards_mismatch')), 10_000, () => `A to report the mismatch; degraded: ${JSON.stringify(a.degraded())}`);
    // Claims are recorded locally only: nothing reaches Redis while the counts disagree.
    const leases = async (): Promise<(string | null)[]> => Promise.all([1, 2, 3].map((k) => admin.zscore(presenceKeys(prefix, k).gateways, 'A')));
    const before = await leases();
    const rec = await claim(a, 's1');
    expect(a.get('ns', 'sb')).toEqual(rec);
    expect(await storedSession()).toBeUndefined();
    // Nor in the renewals that follow: ns/sb hashes to shard 2, one the two-shard peer never reads, and no
    // round may re-assert the session there or renew A's lease in shards 1-3. While the counts disagree the
    // only script A runs is its renewal in shard 0, one per round and one round at a time: the third after
    // the claim starts only once two whole rounds have ended.
    const scripts = async (): Promise<number> => Number(/cmdstat_evalsha:calls=(\d+)/.exec(await admin.info('commandstats'))?.[1] ?? 0);
    const renewalsBefore = await scripts();
    await eventually(async () => (await scripts()) - renewalsBefore > 2, 10_000, 'two more renewal rounds on A');
    expect(shardOf('ns/sb', 4)).toBe(2);
    expect(await storedSession()).toBeUndefined();
    expect(await leases()).toEqual(before);
    await admin.zrem(k0.gateways, 'X');
    // The next renewal finds no disagreeing lease: A writes again and re-asserts what it claimed meanwhile.
    await eventually(async () => (await storedSession()) === 's1', 10_000, 's1 to be re-asserted');
    expect(a.degraded()).toEqual([]);
  });
});

/** 32-bit FNV-1a over UTF-8, written out here so the test does not share the implementation. */
function fnv1a(text: string): number {
  let h = 0x811c9dc5;
  for (const byte of new TextEncoder().encode(text)) {
    h = (h ^ byte) >>> 0;
    h = Number((BigInt(h) * 0x01000193n) % 0x100000000n);
  }
  return h;
}

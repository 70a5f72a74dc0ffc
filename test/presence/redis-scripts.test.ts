import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
import { runScript } from '../../src/sessions/presence/redis-script-runner.js';
import { presenceKeys, scriptKeys, SCRIPTS, TERM_SPAN, type LuaScript } from '../../src/sessions/presence/redis-scripts.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

// The Lua scripts on their own, against a real redis-server: the fencing rules every gateway relies on.

let server: RedisServer;
let redis: Redis;
let prefix = '';
let n = 0;

beforeAll(async () => {
  server = await startRedisServer();
  redis = server.admin();
});
afterAll(async () => {
  await server.stop();
});
beforeEach(async () => {
  prefix = `scripts-${++n}`;
  // Claims need the master's sealed term; with no replicas the first seal call seals it.
  expect(await run(SCRIPTS.term, [0])).toEqual([0, 0, 0]);
  expect(await run(SCRIPTS.seal, [0])).toBe(1);
});

const keys = (): ReturnType<typeof presenceKeys> => presenceKeys(prefix);
const run = (s: LuaScript, args: (string | number)[]): Promise<unknown> => runScript(redis, s, scriptKeys(keys()), [keys().channel, ...args]);
const claim = (gw: string, sid: string, minEpoch = 1, field = 'ns/sb', inc = `${gw}-inc`, term = 0): Promise<unknown> => run(SCRIPTS.claim, [field, gw, inc, sid, 'inst', '1000', minEpoch, term]);
const assertRec = (gw: string, sid: string, epoch: number, field = 'ns/sb', inc = `${gw}-inc`): Promise<unknown> =>
  run(SCRIPTS.assert, [field, gw, inc, sid, 'inst', '1000', epoch]);
const renew = async (gw: string, inc = `${gw}-inc`, ttl = 5000): Promise<unknown[]> => (await run(SCRIPTS.renew, [gw, inc, ttl, JSON.stringify({ i: inc, a: {} }), 60_000, 1])) as unknown[];
const stored = async (field = 'ns/sb'): Promise<Record<string, unknown> | undefined> => {
  const raw = await redis.hget(keys().presence, field);
  return raw === null ? undefined : (JSON.parse(raw) as Record<string, unknown>);
};

describe('claim', () => {
  it('bumps the epoch on every claim, and the counter outlives the record', async () => {
    expect(await claim('A', 's1')).toBe(1);
    expect(await claim('B', 's2')).toBe(2);
    expect(await run(SCRIPTS.release, ['ns/sb', 'B', 's2'])).toBe(1);
    expect(await stored()).toBeUndefined();
    expect(await claim('A', 's3')).toBe(3);
  });

  it('raises a reset counter to the epoch the gateway last saw (Redis restarted without persistence)', async () => {
    expect(await claim('A', 's1', 42)).toBe(42);
    expect(await redis.hget(keys().epochs, 'ns/sb')).toBe('42');
  });

  it('publishes the record with the version it bumped', async () => {
    const sub = server.admin();
    await sub.subscribe(keys().channel);
    const got = new Promise<string>((resolve) => sub.once('message', (_c: string, m: string) => resolve(m)));
    await claim('A', 's1');
    const msg = JSON.parse(await got) as { v: number; op: string; f: string; r: { s: string; e: string; t: string } };
    // Epochs travel as decimal strings: cjson would round a number above 14 digits (a later term's epochs).
    expect(msg).toMatchObject({ v: 1, op: 'set', f: 'ns/sb', r: { s: 's1', e: '1', t: '1000' } });
    expect(await redis.get(keys().version)).toBe('1');
  });
});

describe('terms (fencing across failover)', () => {
  const replid = async (): Promise<string> => /master_replid:(\w+)/.exec(await redis.info('replication'))![1]!;

  it('binds the term to the master: the same master keeps it, a claim in another term writes nothing', async () => {
    expect(await redis.hget(keys().term, 'r')).toBe(await replid());
    expect(await run(SCRIPTS.term, [0])).toEqual([0, 1, 0]);
    expect(await claim('A', 's1', 1, 'ns/sb', 'A-inc', 1)).toBe(-1);
    expect(await stored()).toBeUndefined();
    expect(await redis.get(keys().version)).toBeNull();
  });

  it('a master with another replication id (a promoted replica) starts a higher term whose epochs are above every earlier one', async () => {
    for (let i = 0; i < 5; i++) await claim('A', `s${i}`);
    // The promoted replica lost the last increments: its counter is behind what was handed out.
    await redis.hset(keys().epochs, 'ns/sb', '2');
    await redis.hset(keys().term, 'r', 'f'.repeat(40));
    expect(await renew('A')).toEqual(expect.arrayContaining([-1]));
    expect(await claim('B', 'late')).toBe(-1);
    expect(await run(SCRIPTS.term, [0])).toEqual([1, 0, 0]);
    expect(await claim('B', 'late', 1, 'ns/sb', 'B-inc', 1)).toBe(-1);
    expect(await run(SCRIPTS.seal, [1])).toBe(1);
    const e = (await claim('B', 'new', 1, 'ns/sb', 'B-inc', 1)) as number;
    expect(e).toBe(TERM_SPAN + 1);
    expect(await stored()).toMatchObject({ s: 'new', e: String(TERM_SPAN + 1) });
    expect(await redis.hget(keys().epochs, 'ns/sb')).toBe(String(TERM_SPAN + 1));
    expect((await renew('A')).at(-1)).toBe(1);
  });

  it("a scan and a collection name their term: on another master's (a failover the renewal has not reported) they read and delete nothing", async () => {
    await claim('B', 's1');
    // Term 0 is this master's: the scan reads the record.
    const scan = (await run(SCRIPTS.snapshot, [0])) as unknown[];
    expect(scan[2]).toEqual(['ns/sb', expect.stringContaining('"s":"s1"')]);
    // A replica promoted behind the same connection: B's lease has not reached it, so B's record would look orphaned.
    await redis.hset(keys().term, 'r', 'f'.repeat(40));
    expect(await run(SCRIPTS.snapshot, [0])).toBe(-1);
    expect(await run(SCRIPTS.collect, ['C', 0, 'ns/sb', 's1', 1])).toBe(-1);
    expect((await stored())?.s).toBe('s1');
    expect(await run(SCRIPTS.snapshot, [1])).toBe(-1);
    // Once adopted, the new term's scan and collection run.
    expect(await run(SCRIPTS.term, [0])).toEqual([1, 0, 0]);
    expect(Array.isArray(await run(SCRIPTS.snapshot, [1]))).toBe(true);
    expect(await run(SCRIPTS.collect, ['C', 1, 'ns/sb', 's1', 1])).toBe(1);
  });

  it('the gateway-supplied minimum lifts a term a restart without persistence reset', async () => {
    await redis.del(keys().term);
    expect(await run(SCRIPTS.term, [3])).toEqual([3, 0, 0]);
    expect(await run(SCRIPTS.seal, [2])).toBe(-1);
  });
});

describe('assert (fenced re-write)', () => {
  const table: { name: string; setup: () => Promise<unknown>; gw: string; sid: string; epoch: number; ok: 0 | 1; owner: string | undefined }[] = [
    { name: 'writes into an empty store and raises the counter', setup: async () => undefined, gw: 'A', sid: 's1', epoch: 7, ok: 1, owner: 's1' },
    { name: 'loses to a newer claim by another gateway', setup: () => claim('B', 's2', 5), gw: 'A', sid: 's1', epoch: 4, ok: 0, owner: 's2' },
    { name: 'loses when a newer claim came and went (counter above its epoch)', setup: async () => [await claim('B', 's2', 5), await run(SCRIPTS.release, ['ns/sb', 'B', 's2'])], gw: 'A', sid: 's1', epoch: 4, ok: 0, owner: undefined },
    { name: 'loses a tie to the session already written at that epoch', setup: () => assertRec('B', 's2', 6), gw: 'A', sid: 's1', epoch: 6, ok: 0, owner: 's2' },
    { name: 'overwrites an older record of another gateway', setup: () => claim('B', 's2', 3), gw: 'A', sid: 's1', epoch: 4, ok: 1, owner: 's1' },
    { name: 'adopts its own record when a lost claim reply landed with a higher epoch', setup: () => claim('A', 's1', 9), gw: 'A', sid: 's1', epoch: 8, ok: 1, owner: 's1' },
  ];
  for (const t of table) {
    it(t.name, async () => {
      await t.setup();
      const [ok] = (await assertRec(t.gw, t.sid, t.epoch)) as [number, number, string];
      expect(ok).toBe(t.ok);
      expect((await stored())?.s).toBe(t.owner);
    });
  }

  it('returns the adopted epoch', async () => {
    await claim('A', 's1', 9);
    expect(await assertRec('A', 's1', 8)).toEqual([1, 9, '']);
  });

  it('does not publish when the record is already exactly this', async () => {
    await assertRec('A', 's1', 3);
    const before = await redis.get(keys().version);
    await assertRec('A', 's1', 3);
    expect(await redis.get(keys().version)).toBe(before);
  });
});

describe('release (remove-if-current)', () => {
  it('a stale session id leaves the newer record in place', async () => {
    await claim('A', 's1');
    await claim('B', 's2');
    expect(await run(SCRIPTS.release, ['ns/sb', 'A', 's1'])).toBe(0);
    expect((await stored())?.s).toBe('s2');
  });

  it('another gateway cannot release a session it does not hold', async () => {
    await claim('A', 's1');
    expect(await run(SCRIPTS.release, ['ns/sb', 'B', 's1'])).toBe(0);
    expect(await run(SCRIPTS.release, ['ns/sb', 'A', 's1'])).toBe(1);
  });
});

describe('renew', () => {
  it('reports lapsed on a new lease, then not, and lists live gateways', async () => {
    const [, lapsed1, usurped1] = (await renew('A')) as number[];
    expect([lapsed1, usurped1]).toEqual([1, 0]);
    const [now, lapsed2, , version, leases] = (await renew('A')) as [number, number, number, number, string[]];
    expect(lapsed2).toBe(0);
    expect(version).toBe(1);
    expect(leases[0]).toBe('A');
    expect(Number(leases[1]) - now).toBe(5000);
  });

  it('reports lapsed after expiry and usurped when another incarnation holds a live lease', async () => {
    const [now] = (await renew('A', 'one', 30)) as number[];
    // The lease's expiry moved into the past, as the clock would move past it.
    await redis.zadd(keys().gateways, now! - 1, 'A');
    expect(((await renew('A', 'one', 5000)) as number[])[1]).toBe(1);
    const [, lapsed, usurped] = (await renew('A', 'two', 5000)) as number[];
    expect([lapsed, usurped]).toEqual([1, 1]);
  });

  it('writes nothing and returns the other count while a live lease names another shard count', async () => {
    const renewWith = async (gw: string, shards: number): Promise<unknown[]> => (await run(SCRIPTS.renew, [gw, `${gw}-inc`, 5000, JSON.stringify({ i: `${gw}-inc`, a: {}, t: -1, k: shards }), 60_000, shards])) as unknown[];
    expect((await renewWith('A', 4)).at(-2)).toBe(4);
    const refused = await renewWith('B', 2);
    expect(refused.at(-2)).toBe(4);
    expect(refused.at(-1)).toBe(-1);
    expect(await redis.zscore(keys().gateways, 'B')).toBeNull();
    expect(await redis.hget(keys().gatewayInfo, 'B')).toBeNull();
    // A lease without k (a gateway of a version before shards) counts as unsharded.
    await redis.zrem(keys().gateways, 'A');
    await renew('OLD');
    expect((await renewWith('B', 2)).at(-2)).toBe(1);
    // Once no live lease disagrees (a fleet restarted with a new count), the new count is accepted.
    await redis.zrem(keys().gateways, 'OLD');
    expect((await renewWith('B', 2)).at(-2)).toBe(2);
    expect(await redis.zscore(keys().gateways, 'B')).not.toBeNull();
  });

  it('a peer lease info that is not JSON, or whose shard count is not a count, fails no renewal and counts as agreeing', async () => {
    const renewWith = async (gw: string, shards: number): Promise<unknown[]> => (await run(SCRIPTS.renew, [gw, `${gw}-inc`, 5000, JSON.stringify({ i: `${gw}-inc`, a: {}, t: -1, k: shards }), 60_000, shards])) as unknown[];
    await renewWith('A', 4);
    for (const bad of ['not json', '"a string"', JSON.stringify({ i: 'x', k: '4x' }), JSON.stringify({ i: 'x', k: 1.5 }), JSON.stringify({ i: 'x', k: -2 })]) {
      await redis.hset(keys().gatewayInfo, 'A', bad);
      const reply = await renewWith('B', 2);
      expect(reply.at(-2), bad).toBe(2);
      expect(await redis.zscore(keys().gateways, 'B'), bad).not.toBeNull();
    }
  });

  it('touches no presence record (cost grows with gateways, not sessions)', async () => {
    await renew('A');
    for (let i = 0; i < 50; i++) await claim('A', `s${i}`, 1, `ns/sb${i}`);
    await redis.config('RESETSTAT');
    await renew('A');
    const stats = await redis.info('commandstats');
    expect(stats).not.toMatch(/cmdstat_hgetall|cmdstat_hdel/);
    expect(Number(/cmdstat_hset:calls=(\d+)/.exec(stats)?.[1])).toBe(1);
  });

  it('reads the live leases once: one range read and one HGET per live gateway, and returns them all', async () => {
    for (const gw of ['B', 'C', 'D', 'E']) await renew(gw);
    await renew('A');
    await redis.config('RESETSTAT');
    const [now, , , , leases] = (await renew('A')) as [number, number, number, number, string[]];
    const stats = await redis.info('commandstats');
    const calls = (cmd: string): number => Number(new RegExp(`cmdstat_${cmd}:calls=(\\d+)`).exec(stats)?.[1] ?? 0);
    // One ZRANGEBYSCORE of the live leases and one of the long-expired ones to forget.
    expect(calls('zrangebyscore')).toBe(2);
    expect(calls('hget')).toBe(5);
    expect(calls('zscore')).toBe(0);
    const byId = new Map(Array.from({ length: leases.length / 3 }, (_, j) => [leases[3 * j]!, [Number(leases[3 * j + 1]) - now, JSON.parse(leases[3 * j + 2]!) as { i: string }]] as const));
    expect([...byId.keys()].sort()).toEqual(['A', 'B', 'C', 'D', 'E']);
    // This gateway's own entry is the lease just written.
    expect(byId.get('A')?.[0]).toBe(5000);
    expect(byId.get('A')?.[1].i).toBe('A-inc');
    // A first renewal (no live lease yet) returns its lease too.
    const [now2, , , , fresh] = (await renew('F')) as [number, number, number, number, string[]];
    expect(fresh.slice(-3, -1)).toEqual(['F', String(now2 + 5000)]);
  });
});

describe('collect', () => {
  it('deletes a record only while no live lease backs it', async () => {
    await renew('A');
    await claim('A', 's1');
    await claim('B', 's2', 1, 'ns/other');
    // A's lease is live: its record stays. B never held a lease: its record goes.
    expect(await run(SCRIPTS.collect, ['C', 0, 'ns/sb', 's1', 1, 'ns/other', 's2', 1])).toBe(1);
    expect((await stored())?.s).toBe('s1');
    expect(await stored('ns/other')).toBeUndefined();
  });

  it('is fenced by session and epoch', async () => {
    await claim('B', 's2');
    expect(await run(SCRIPTS.collect, ['C', 0, 'ns/sb', 's2', 7])).toBe(0);
    expect(await run(SCRIPTS.collect, ['C', 0, 'ns/sb', 'sX', 1])).toBe(0);
    expect((await stored())?.s).toBe('s2');
  });
});

describe('leave', () => {
  it('drops the lease and only the sessions still this gateway holds', async () => {
    await renew('A');
    await claim('A', 's1');
    await claim('A', 's3', 1, 'ns/third');
    await claim('B', 's2', 1, 'ns/third');
    expect(await run(SCRIPTS.leave, ['A', 'A-inc', 'ns/sb', 's1', 'ns/third', 's3'])).toBe(1);
    expect(await stored()).toBeUndefined();
    expect((await stored('ns/third'))?.s).toBe('s2');
    expect(await redis.zscore(keys().gateways, 'A')).toBeNull();
  });

  it('keeps a lease another incarnation holds', async () => {
    await renew('A', 'new');
    await run(SCRIPTS.leave, ['A', 'old']);
    expect(await redis.zscore(keys().gateways, 'A')).not.toBeNull();
  });
});

describe('script cache', () => {
  it('falls back to EVAL after SCRIPT FLUSH (NOSCRIPT)', async () => {
    await claim('A', 's1');
    await redis.script('FLUSH');
    expect(await claim('A', 's2')).toBe(2);
  });
});

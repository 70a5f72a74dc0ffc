import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SandgateError } from '../../src/domain/errors.js';
import { createLogger, MemoryLogSink } from '../../src/observability/logger.js';
import type { PresenceRecord } from '../../src/sessions/presence/presence-store.js';
import { type RedisPresence } from '../../src/sessions/presence/redis-presence.js';
import { PresenceStores } from '../helpers/presence-stores.js';
import { presenceKeys, shardOf, TERM_SPAN } from '../../src/sessions/presence/redis-scripts.js';
import { startRedisCluster, type RedisClusterGroup } from '../helpers/redis-cluster.js';
import { eventually } from '../helpers/eventually.js';
import type { RedisServer } from '../helpers/redis-server.js';

/**
 * Presence split into four shards on a three-master Redis Cluster (one replica each). Each shard's keys
 * share one hash tag, so each shard is one slot, and the shards spread over the masters. Killing the
 * master of some shards promotes its replica: those shards adopt a new term and re-assert their sessions;
 * the shards on the other masters keep their term, their records and their leases (the cluster runs with
 * `cluster-require-full-coverage no`, so those masters answer throughout).
 */

const TTL = 1000;
const SHARDS = 4;

let cluster: RedisClusterGroup;
const stores = new PresenceStores(() => ({ url: 'redis://127.0.0.1', redisOptions: { cluster: cluster.seeds }, leaseTtlMs: TTL, rescanMs: 60_000, log: createLogger('debug', sink) }));
const sink = new MemoryLogSink();

beforeAll(async () => {
  // The other masters serve their shards while the failed one's slots await a replica (docs/presence.md).
  cluster = await startRedisCluster({ masters: 3, replicasPerMaster: 1, requireFullCoverage: false });
}, 30_000);
afterAll(async () => {
  await stores.closeAll();
  await cluster.stop();
});

const make = (gatewayId: string, prefix: string, shards = SHARDS): RedisPresence => stores.make(gatewayId, { keyPrefix: prefix, shards });

async function started(gatewayId: string, prefix: string): Promise<RedisPresence> {
  const s = make(gatewayId, prefix);
  await s.start();
  await eventually(() => s.degraded().length === 0, 8000, `${gatewayId} healthy`);
  return s;
}

const claim = (s: RedisPresence, name: string, sessionId: string): Promise<PresenceRecord> => s.claim('ns', name, { sessionId, instanceId: `inst-${sessionId}`, since: 1 });

/** The master serving each shard of `prefix`, by the slot of its keys. */
async function shardOwners(prefix: string): Promise<RedisServer[]> {
  const owners: RedisServer[] = [];
  for (let k = 0; k < SHARDS; k++) {
    const keys = Object.values(presenceKeys(prefix, k)).filter((key) => !key.endsWith(':presence-changes'));
    const slots = new Set(await Promise.all(keys.map((key) => cluster.slotOf(key))));
    // Every key of a shard is in one slot: the shard's scripts may touch them all.
    expect(slots.size).toBe(1);
    owners.push(await cluster.ownerOf([...slots][0]!));
  }
  return owners;
}

describe('RedisPresence in four shards on a three-master Redis Cluster', () => {
  it('spreads shards over masters; a failover of one master gives only its shards a new term, fenced, with no false Ready', { timeout: 60_000 }, async () => {
    // Which master a hash tag lands on is up to CRC16; take the first prefix whose four shards use all three
    // masters, so that a failover leaves some shards on surviving masters.
    let prefix = '';
    let owners: RedisServer[] = [];
    for (let i = 0; owners.length === 0 || new Set(owners).size < 3; i++) {
      prefix = `shard-${i}`;
      owners = await shardOwners(prefix);
    }
    const a = await started('A', prefix);
    const b = await started('B', prefix);

    // Sandboxes in every shard, claimed on both gateways.
    const names = Array.from({ length: 24 }, (_, i) => `sb${i}`);
    const records = new Map<string, PresenceRecord>();
    for (const [i, name] of names.entries()) records.set(name, await claim(i % 2 === 0 ? a : b, name, `s-${name}`));
    for (const s of [a, b]) await eventually(() => names.every((n) => s.get('ns', n)?.sessionId === `s-${n}`), 5000, `${s.gatewayId} to mirror every claim`);
    const shardOfName = (name: string): number => shardOf(`ns/${name}`, SHARDS);
    expect(new Set(names.map(shardOfName)).size).toBe(SHARDS);
    expect(a.terms()).toEqual([0, 0, 0, 0]);

    const victim = owners[shardOfName('sb0')]!;
    const hit = [0, 1, 2, 3].filter((k) => owners[k] === victim);
    const spared = [0, 1, 2, 3].filter((k) => owners[k] !== victim);
    expect(spared.length).toBeGreaterThan(0);
    const versionsBefore = await Promise.all(spared.map((k) => owners[k]!.admin().get(presenceKeys(prefix, k).version)));

    // A session in a failing shard ends just before the kill: its release may not reach the replica, and
    // no gateway may show it again (a false Ready).
    const gone = names.find((n) => hit.includes(shardOfName(n)) && records.get(n)!.gatewayId === 'B')!;
    const falseReady: string[] = [];
    a.onChange((_ns, name, r) => {
      if (name === gone && r !== undefined) falseReady.push(`${name} ${r.sessionId}`);
    });
    expect(await b.release('ns', gone, `s-${gone}`)).toBe(true);
    await eventually(() => a.get('ns', gone) === undefined, 3000, 'A to see the release');
    const live = names.filter((n) => n !== gone);

    await victim.kill();
    const promoted = await eventually(
      async () => {
        const owner = await cluster.ownerOf(await cluster.slotOf(presenceKeys(prefix, hit[0]).presence)).catch(() => undefined);
        return owner !== undefined && owner !== victim ? owner : undefined;
      },
      15_000,
      'a replica to take over the failed shards',
    );

    // The failed shards adopt a new term on the promoted replica; the others keep term 0.
    for (const s of [a, b]) {
      await eventually(() => hit.every((k) => (s.terms()[k] ?? 0) >= 1) && s.degraded().length === 0, 10_000, `${s.gatewayId} in the new term of the failed shards`);
      expect(spared.map((k) => s.terms()[k])).toEqual(spared.map(() => 0));
    }
    for (const k of hit) expect(Number(await promoted.admin().hget(presenceKeys(prefix, k).term, 't'))).toBeGreaterThanOrEqual(1);
    for (const k of spared) expect(await owners[k]!.admin().hget(presenceKeys(prefix, k).term, 't')).toBe('0');
    // Only the failed shards changed term (the log names the shard of every term change).
    const changed = new Set(sink.lines.filter((l) => String(l.msg).startsWith('presence term changed')).map((l) => l.shard));
    expect([...changed].sort()).toEqual(hit);
    // The spared shards' records were not rewritten: their change counters did not move.
    expect(await Promise.all(spared.map((k) => owners[k]!.admin().get(presenceKeys(prefix, k).version)))).toEqual(versionsBefore);

    // Every live session of the failed shards is re-asserted on the promoted replica.
    await eventually(
      async () => {
        const held = await Promise.all(hit.map((k) => promoted.admin().hkeys(presenceKeys(prefix, k).presence)));
        return held.flat().sort().join() === live.filter((n) => hit.includes(shardOfName(n))).map((n) => `ns/${n}`).sort().join();
      },
      8000,
      'the live sessions of the failed shards on the promoted replica',
    );
    for (const s of [a, b]) for (const n of live) expect(s.get('ns', n)).toEqual(records.get(n));
    expect(falseReady).toEqual([]);
    expect(b.get('ns', gone)).toBeUndefined();

    // No epoch reused: a new claim in a failed shard is in the new term, above every earlier epoch; in a
    // spared shard the counter simply goes on.
    const inHit = live.find((n) => hit.includes(shardOfName(n)))!;
    const inSpared = live.find((n) => spared.includes(shardOfName(n)))!;
    const next = await claim(b, inHit, 'later-1');
    expect(next.epoch).toBeGreaterThan(TERM_SPAN);
    const sparedNext = await claim(a, inSpared, 'later-2');
    expect(sparedNext.epoch).toBe(records.get(inSpared)!.epoch + 1);
    await eventually(() => a.get('ns', inHit)?.sessionId === 'later-1' && b.get('ns', inSpared)?.sessionId === 'later-2', 5000, 'the later claims mirrored');

    // A gateway configured with another shard count is refused: it would look for sandboxes in other shards.
    const odd = make('C', prefix, 2);
    const err = await odd.start().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(SandgateError);
    expect((err as SandgateError).code).toBe('presence_shards_mismatch');
  });
});

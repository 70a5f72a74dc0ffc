import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ApiKeyAuth, newApiKey } from '../../src/auth/api-keys.js';
import { RedisApiKeyStore } from '../../src/auth/api-key-redis-store.js';
import { redisTarget } from '../../src/lib/redis-connection.js';
import { createLogger, MemoryLogSink } from '../../src/observability/logger.js';
import type { PresenceRecord } from '../../src/sessions/presence/presence-store.js';
import { type RedisPresence } from '../../src/sessions/presence/redis-presence.js';
import { PresenceStores } from '../helpers/presence-stores.js';
import { presenceKeys, TERM_SPAN } from '../../src/sessions/presence/redis-scripts.js';
import { startRedisCluster, type RedisClusterGroup } from '../helpers/redis-cluster.js';
import { eventually } from '../helpers/eventually.js';

/**
 * Redis Cluster: three masters with one replica each (`redis-cli --cluster create`). Every presence key
 * shares one hash tag, so the scripts run on the one node serving that slot (a cross-slot script would
 * fail with CROSSSLOT). Two gateways' stores claim and mirror through ioredis's Cluster client while the
 * presence slot is migrated to another master, and then while its master is killed and a replica takes
 * over (a new replication id: a new term). The API key store uses the same connection options.
 */

const TTL = 1000;
const PREFIX = 'cl';

let cluster: RedisClusterGroup;
const stores = new PresenceStores(() => ({ url: 'redis://127.0.0.1', redisOptions: { cluster: cluster.seeds }, leaseTtlMs: TTL, rescanMs: 60_000, keyPrefix: PREFIX, log: createLogger('silent', new MemoryLogSink()) }));

beforeAll(async () => {
  cluster = await startRedisCluster({ masters: 3, replicasPerMaster: 1 });
}, 30_000);
afterAll(async () => {
  await stores.closeAll();
  await cluster.stop();
});

async function started(gatewayId: string): Promise<RedisPresence> {
  const s = await stores.started(gatewayId);
  // ioredis's Cluster client may retry its first ready check once under load; the store heals itself.
  await eventually(() => s.degraded().length === 0, 8000, `${gatewayId} healthy`);
  return s;
}

const claim = (s: RedisPresence, name: string, sessionId: string): Promise<PresenceRecord> => s.claim('ns', name, { sessionId, instanceId: `inst-${sessionId}`, since: 1 });
const holds = (s: RedisPresence, name: string, sessionId: string) => () => s.get('ns', name)?.sessionId === sessionId;

describe('RedisPresence on a three-master Redis Cluster', () => {
  it('claims and mirrors across gateways, survives a migration of the presence slot, then a failover of its master', { timeout: 45_000 }, async () => {
    const a = await started('A');
    const b = await started('B');
    const slot = await cluster.slotOf(presenceKeys(PREFIX).presence);
    // All presence keys are in one slot.
    for (const key of Object.values(presenceKeys(PREFIX))) expect(await cluster.slotOf(key)).toBe(slot);

    const first = await claim(b, 'one', 's1');
    await eventually(holds(a, 'one', 's1'), 3000, 'A to mirror B');
    expect(a.get('ns', 'one')).toEqual(first);

    // Slot migration: the presence keys move to another master while both gateways keep working.
    const from = await cluster.ownerOf(slot);
    const masters = await Promise.all(cluster.nodes.map(async (n) => ((await n.admin().info('replication')).includes('role:master') ? n : undefined)));
    const to = masters.find((n) => n !== undefined && n !== from)!;
    await cluster.migrate(slot, to);
    expect(await cluster.ownerOf(slot)).toBe(to);
    // MOVED redirects the next script. The term is bound to the serving master's replication id, so the
    // store may adopt a new term on the new owner (a legitimate bump): either way the claim is the first
    // epoch of its term.
    const second = await claim(a, 'two', 's2');
    expect(second.epoch % TERM_SPAN).toBe(1);
    await eventually(holds(b, 'two', 's2'), 5000, 'B to mirror a claim made after the migration');
    expect(await b.release('ns', 'one', 's1')).toBe(true);
    await eventually(() => a.get('ns', 'one') === undefined, 5000, 'A to see the release');

    // Failover: the master now serving the slot dies; its replica takes over with a new replication id.
    const third = await claim(b, 'three', 's3');
    await eventually(holds(a, 'three', 's3'), 3000);
    await to.kill();
    const promoted = await eventually(
      async () => {
        const owner = await cluster.ownerOf(slot).catch(() => undefined);
        return owner !== undefined && owner !== to ? owner : undefined;
      },
      15_000,
      'a replica to take over the presence slot',
    );
    // Every live session is re-asserted on the promoted replica, in a new term.
    await eventually(
      async () => {
        const records = await promoted.admin().hgetall(presenceKeys(PREFIX).presence);
        return Object.keys(records).sort().join() === 'ns/three,ns/two';
      },
      8000,
      'the live sessions on the promoted replica',
    );
    await eventually(() => [...a.degraded(), ...b.degraded()].length === 0, 8000, 'both stores healthy');
    expect(Number(await promoted.admin().hget(presenceKeys(PREFIX).term, 't'))).toBeGreaterThanOrEqual(1);
    expect(a.get('ns', 'three')).toEqual(third);
    expect(b.get('ns', 'two')).toEqual(second);
    // A new claim lands in the new term, above every epoch handed out before.
    const fourth = await claim(a, 'three', 's4');
    expect(fourth.epoch).toBeGreaterThan(Math.max(TERM_SPAN, first.epoch, second.epoch, third.epoch));
    await eventually(holds(b, 'three', 's4'), 5000, 'B to mirror a claim made after the failover');
  });

  // The add-then-revoke steps of auth/api-keys.test.ts, here on a Redis Cluster: what is under test is
  // that the key store connects with the Cluster options, so it reuses a known scenario.
  it('the API key store connects with the same Cluster options', async () => {
    const pepper = new TextEncoder().encode('p'.repeat(32));
    const target = redisTarget('redis://127.0.0.1', JSON.stringify({ cluster: cluster.seeds }), 'apiKeys');
    const w = new RedisApiKeyStore(target, 'keys-on-cluster');
    const r = new RedisApiKeyStore(target, 'keys-on-cluster');
    await w.start();
    await r.start();
    try {
      const k = newApiKey(pepper, 'team-a');
      await w.add(k.record);
      const auth = new ApiKeyAuth(r, pepper, 'admin');
      await eventually(() => auth.principal(k.key).kind === 'team', 3000, 'the key on the other store');
      expect(await w.revoke(k.record.id)).toBe(true);
      await eventually(() => auth.principal(k.key).kind === 'invalid', 3000, 'the revocation on the other store');
    } finally {
      await w.close();
      await r.close();
    }
  });
});

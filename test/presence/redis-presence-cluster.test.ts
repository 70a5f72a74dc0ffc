import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger, MemoryLogSink } from '../../src/observability/logger.js';
import { createRedisPresence, type RedisPresence } from '../../src/sessions/presence/redis-presence.js';
import { eventually, startRedisServer, type RedisServer } from '../helpers/redis-server.js';

// Redis Cluster: every key shares one hash tag, so the scripts run on one slot's node. A one-node
// cluster that owns all 16384 slots is enough to show the keys, scripts and pub/sub work through
// ioredis's Cluster client (a cross-slot script would fail with CROSSSLOT here).

let server: RedisServer;

beforeAll(async () => {
  server = await startRedisServer({ args: ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-announce-ip', '127.0.0.1'] });
  const admin = server.admin();
  await admin.call('CLUSTER', 'ADDSLOTSRANGE', '0', '16383');
  for (let i = 0; i < 200 && !((await admin.call('CLUSTER', 'INFO')) as string).includes('cluster_state:ok'); i++) await new Promise((r) => setTimeout(r, 25));
});
afterAll(async () => {
  await server.stop();
});

describe('RedisPresence on Redis Cluster', () => {
  it('claims, mirrors and releases across two gateways', async () => {
    const cluster = [{ host: '127.0.0.1', port: server.port }];
    const make = (gatewayId: string): RedisPresence =>
      createRedisPresence({ url: server.url, redisOptions: { cluster }, gatewayId, leaseTtlMs: 450, rescanMs: 60_000, keyPrefix: 'cl', log: createLogger('silent', new MemoryLogSink()) });
    const a = make('A');
    const b = make('B');
    try {
      await a.start();
      await b.start();
      // ioredis's Cluster client may retry its first ready check once under load; the store heals itself.
      await eventually(() => [...a.degraded(), ...b.degraded()].length === 0, 5000, 'both stores healthy');
      const rec = await b.claim('ns', 'sb', { sessionId: 's1', instanceId: 'i', since: 1 });
      await eventually(() => a.get('ns', 'sb')?.sessionId === 's1');
      expect(a.get('ns', 'sb')).toEqual(rec);
      expect(await b.release('ns', 'sb', 's1')).toBe(true);
      await eventually(() => a.get('ns', 'sb') === undefined);
      expect([...a.degraded(), ...b.degraded()]).toEqual([]);
    } finally {
      await Promise.all([a.close({ release: true }), b.close({ release: true })]);
    }
  });
});

import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { resolveConfig } from '../../src/config/load.js';
import type { Driver } from '../../src/drivers/driver.js';
import { startGateway } from '../../src/gateway.js';
import { deadlineIn, Lifecycle, stopAll, type Started, type StopProblem } from '../../src/lib/lifecycle.js';
import { MemoryLogSink } from '../../src/observability/logger.js';
import { eventually } from '../helpers/eventually.js';
import { freePort, startRedisServer, type RedisServer } from '../helpers/redis-server.js';

function bind(port: number): Promise<Server> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(port, '127.0.0.1', () => resolve(s));
  });
}

const close = (s: Server): Promise<void> => new Promise((r) => s.close(() => r()));

describe('lifecycle: components start in order, stop in reverse', () => {
  const recorder = () => {
    const events: string[] = [];
    const comp = (name: string): Started => ({
      name,
      stop() {
        events.push(`stop ${name}`);
      },
    });
    const start = (life: Lifecycle, name: string, fail = false): Promise<string> =>
      life.start(
        name,
        () => {
          if (fail) throw new Error(`${name} failed`);
          events.push(`start ${name}`);
          return name;
        },
        (started) => {
          events.push(`stop ${started}`);
        },
      );
    return { events, comp, start };
  };

  it('hands back what each start made; a failed start adds no stop, and stop runs the started ones in reverse, once', async () => {
    const { events, start } = recorder();
    const life = new Lifecycle(() => undefined);
    expect(await start(life, 'a')).toBe('a');
    await start(life, 'b');
    await expect(start(life, 'c', true)).rejects.toThrow('c failed');
    await life.stop(deadlineIn(1000));
    await life.stop(deadlineIn(1000));
    expect(events).toEqual(['start a', 'start b', 'stop b', 'stop a']);
  });

  it('stops in reverse; a stop that overruns the shared deadline is abandoned and reported, the rest still stop', async () => {
    vi.useFakeTimers();
    try {
      const { events, comp } = recorder();
      const hung: Started = { name: 'hung', stop: () => new Promise<void>(() => undefined) };
      const problems: StopProblem[] = [];
      const stopping = stopAll([comp('a'), hung, comp('b')], deadlineIn(500), (p) => problems.push(p));
      await vi.advanceTimersByTimeAsync(500);
      await stopping;
      expect(events).toEqual(['stop b', 'stop a']);
      expect(problems).toEqual([{ component: 'hung', err: undefined }]);
    } finally {
      vi.useRealTimers();
    }
  });
});

describe('a gateway that fails to start leaves nothing open', () => {
  // A redis-server of its own: the cases count the clients a failed start leaves connected, which no
  // other test's connections may blur.
  let redis: RedisServer;
  let secretFile: string;
  beforeAll(async () => {
    redis = await startRedisServer();
    const dir = mkdtempSync(join(tmpdir(), 'sandgate-lifecycle-'));
    secretFile = join(dir, 'secret');
    writeFileSync(secretFile, 'lifecycle-test-supervisor-secret-0123456789');
  });
  afterAll(() => redis.stop());

  async function ports() {
    return { grpcPort: await freePort(), adminPort: await freePort(), supervisorPort: await freePort(), proxyPort: await freePort(), relayPort: await freePort() };
  }

  /** Redis clients other than the one asking. */
  async function otherClients(): Promise<number> {
    const a = redis.admin();
    const list = (await a.client('LIST')) as string;
    a.disconnect();
    return list.trim().split('\n').length - 1;
  }

  it.each([
    ['the proxy port is taken', 'proxyPort', 'listen_failed', '--proxy-port'],
    ['the supervisor port is taken', 'supervisorPort', 'listen_failed', '--supervisor-port'],
    ['the API key store is unreachable', 'apiKeys', 'start_failed', '--api-keys'],
    ['a driver fails its start', 'driver', 'start_failed', '--drivers'],
    ['a live gateway uses another --presence-shards', 'presenceShards', 'presence_shards_mismatch', '--presence-shards'],
  ] as const)('%s: the error names the flag, and every port and Redis connection is free again', async (_what, taken, code, flag) => {
    const p = await ports();
    const blocker = taken === 'apiKeys' || taken === 'driver' || taken === 'presenceShards' ? undefined : await bind(p[taken]);
    const admin = redis.admin();
    try {
      // A live peer whose lease (in shard 0, the keys every shard count shares) says it runs 4 shards.
      if (taken === 'presenceShards') {
        await admin.zadd('{sandgate}:gateways', Date.now() + 60_000, 'peer-with-4-shards');
        await admin.hset('{sandgate}:gateway-info', 'peer-with-4-shards', JSON.stringify({ i: 'peer-inc', a: {}, t: 0, k: 4 }));
      }
      const deadRedis = await freePort();
      const keyDir = mkdtempSync(join(tmpdir(), 'sandgate-lifecycle-keys-'));
      writeFileSync(join(keyDir, 'pepper'), 'lifecycle-test-pepper-0123456789abcdef');
      const config = resolveConfig({
        overrides: {
          listenHost: '127.0.0.1',
          ...p,
          gatewayId: 'gw-fail',
          presence: redis.url,
          supervisorSecretFile: secretFile,
          shutdownTimeoutMs: 1000,
          ...(taken === 'apiKeys' ? { apiKeys: `redis://127.0.0.1:${deadRedis}`, keyPepperFile: join(keyDir, 'pepper') } : {}),
        },
      });
      // Fails after the listeners, the presence store and the supervisor endpoint have started.
      const broken: Driver = { id: 'grpc/broken', start: () => Promise.reject(new Error('connection refused')), stop: () => Promise.resolve() };
      const err = await startGateway({ config, drivers: taken === 'driver' ? [broken] : [], logDestination: new MemoryLogSink() }).then(
        () => undefined,
        (e: unknown) => e as { code: string; message: string },
      );
      expect(err?.code).toBe(code);
      expect(err?.message).toContain(flag);
      if (taken === 'presenceShards') {
        await admin.zrem('{sandgate}:gateways', 'peer-with-4-shards');
        // It wrote no lease: the refusal came before any write.
        expect(await admin.zscore('{sandgate}:gateways', 'gw-fail')).toBeNull();
      }
    } finally {
      // Even when an assertion above failed: a client left open here would fail every later case's count.
      admin.disconnect();
      if (blocker !== undefined) await close(blocker);
    }
    // Every listener that had started is closed: each port binds again.
    for (const port of Object.values(p)) await close(await bind(port));
    // The presence store starts before the supervisor endpoint and the drivers: where it had connected,
    // its connections are gone.
    await eventually(async () => (await otherClients()) === 0, 5000, 'no Redis client left');
  });
});

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { eventually } from './eventually.js';
import { freePort, startRedisServer, type RedisServer } from './redis-server.js';

/**
 * A Sentinel-managed Redis on loopback for one test: a master, its replicas and three sentinels (quorum 2),
 * each run as `redis-server <conf> --sentinel` in its own temp dir on free ports. The sentinels declare the
 * master down after `downAfterMs` and bound a failover by `failoverTimeoutMs`, both small so a failover takes
 * seconds. Nothing here touches the system Redis on 6379.
 */
export interface SentinelGroup {
  readonly name: string;
  /** The data nodes, master first (as started; after a failover, ask `masterPort()`). */
  readonly nodes: readonly RedisServer[];
  readonly sentinelPorts: readonly number[];
  /** `--presence-redis-options` / `redisOptions` for ioredis. */
  readonly options: { sentinels: { host: string; port: number }[]; name: string };
  /** The master's port as the sentinels currently report it. */
  masterPort(): Promise<number>;
  /** The node whose port the sentinels report as master. */
  master(): Promise<RedisServer>;
  /** Resolves once the sentinels report a master other than `port`; returns the new master's port. */
  switched(fromPort: number, timeoutMs?: number): Promise<number>;
  stop(): Promise<void>;
}

export interface SentinelGroupOptions {
  readonly replicas?: number;
  readonly downAfterMs?: number;
  readonly failoverTimeoutMs?: number;
}

const NAME = 'sandgate-test';

function admin(port: number): Redis {
  const r = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 1, lazyConnect: true });
  r.on('error', () => undefined);
  return r;
}

async function ask<T>(port: number, fn: (r: Redis) => Promise<T>): Promise<T | undefined> {
  const r = admin(port);
  try {
    await r.connect();
    return await fn(r);
  } catch {
    return undefined;
  } finally {
    r.disconnect();
  }
}

/** Diskless sync without delay: a replica is in sync within milliseconds of starting. */
const DATA_ARGS = ['--repl-diskless-sync', 'yes', '--repl-diskless-sync-delay', '0'];

export async function startSentinelGroup(o: SentinelGroupOptions = {}): Promise<SentinelGroup> {
  const replicaCount = o.replicas ?? 1;
  const downAfter = o.downAfterMs ?? 500;
  const failoverTimeout = o.failoverTimeoutMs ?? 2000;
  const master = await startRedisServer({ args: DATA_ARGS });
  const nodes: RedisServer[] = [master];
  const procs: ChildProcess[] = [];
  const dir = mkdtempSync(join(tmpdir(), 'sandgate-sentinel-'));
  const stop = async (): Promise<void> => {
    await Promise.all(
      procs.map(async (p) => {
        if (p.exitCode !== null || p.signalCode !== null || p.pid === undefined) return;
        const exited = new Promise((resolve) => p.once('exit', resolve));
        p.kill('SIGKILL');
        await exited;
      }),
    );
    for (const n of nodes) n.resume();
    await Promise.all(nodes.map((n) => n.stop()));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    return { ...(await startSentinels(master, nodes, procs, dir, { replicaCount, downAfter, failoverTimeout })), stop };
  } catch (err) {
    // Nothing started here outlives a group that could not start (redis-server missing, say).
    await stop();
    throw err;
  }
}

async function startSentinels(
  master: RedisServer,
  nodes: RedisServer[],
  procs: ChildProcess[],
  dir: string,
  o: { readonly replicaCount: number; readonly downAfter: number; readonly failoverTimeout: number },
): Promise<Omit<SentinelGroup, 'stop'>> {
  const { replicaCount, downAfter, failoverTimeout } = o;
  for (let i = 0; i < replicaCount; i++) nodes.push(await startRedisServer({ args: [...DATA_ARGS, '--replicaof', '127.0.0.1', String(master.port)] }));
  await eventually(
    async () => {
      const info = await master.admin().info('replication');
      return (info.match(/state=online/g) ?? []).length === replicaCount;
    },
    10_000,
    'replicas online',
  );

  const sentinelPorts: number[] = [];
  for (let i = 0; i < 3; i++) {
    const port = await freePort();
    const conf = join(dir, `sentinel-${i}.conf`);
    writeFileSync(
      conf,
      [
        `port ${port}`,
        'bind 127.0.0.1',
        `dir ${dir}`,
        `sentinel monitor ${NAME} 127.0.0.1 ${master.port} 2`,
        `sentinel down-after-milliseconds ${NAME} ${downAfter}`,
        `sentinel failover-timeout ${NAME} ${failoverTimeout}`,
        `sentinel parallel-syncs ${NAME} 1`,
        '',
      ].join('\n'),
    );
    // `redis-server --sentinel` is the same program `redis-sentinel` links to: redis-server alone is enough.
    const proc = spawn('redis-server', [conf, '--sentinel'], { stdio: 'ignore' });
    // A missing binary is an 'error' event: the discovery wait below then fails, and the caller's stop() cleans up.
    proc.on('error', () => undefined);
    procs.push(proc);
    sentinelPorts.push(port);
  }
  // A failover needs the quorum to agree and a majority to elect a leader: wait until every sentinel has
  // discovered the other two (hello messages every 2 s) and the replicas.
  await eventually(
    async () => {
      for (const p of sentinelPorts) {
        const ok = await ask(p, async (r) => {
          const peers = (await r.call('SENTINEL', 'SENTINELS', NAME)) as unknown[];
          const replicas = (await r.call('SENTINEL', 'REPLICAS', NAME)) as unknown[];
          return peers.length === 2 && replicas.length === replicaCount;
        });
        if (ok !== true) return false;
      }
      return true;
    },
    15_000,
    'sentinels to discover each other',
  );

  const masterPort = async (): Promise<number> => {
    for (const p of sentinelPorts) {
      const addr = await ask(p, (r) => r.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', NAME) as Promise<string[] | null>);
      if (addr?.[1] !== undefined) return Number(addr[1]);
    }
    throw new Error('no sentinel answered');
  };

  return {
    name: NAME,
    nodes,
    sentinelPorts,
    options: { sentinels: sentinelPorts.map((port) => ({ host: '127.0.0.1', port })), name: NAME },
    masterPort,
    async master() {
      const port = await masterPort();
      const node = nodes.find((n) => n.port === port);
      if (node === undefined) throw new Error(`sentinels report an unknown master port ${port}`);
      return node;
    },
    async switched(fromPort, timeoutMs = 15_000) {
      // Every sentinel must agree, so clients asking any of them find the new master.
      return eventually(
        async () => {
          const ports = await Promise.all(sentinelPorts.map((p) => ask(p, (r) => r.call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', NAME) as Promise<string[] | null>)));
          const seen = new Set(ports.map((a) => Number(a?.[1])));
          const [only] = [...seen];
          return seen.size === 1 && only !== undefined && only !== fromPort && !Number.isNaN(only) ? only : undefined;
        },
        timeoutMs,
        `the sentinels to switch the master away from ${fromPort}`,
      );
    },
  };
}

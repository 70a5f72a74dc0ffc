import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { freePort, sleep, type Child, type ProcessGroup } from './processes.js';

/**
 * A Sentinel-managed Redis for the redis-ha bench: a master, one replica and three sentinels (quorum 2),
 * loopback only, no persistence, started through the section's ProcessGroup (stopped with it). Sentinel
 * declares the master down after 1 s, the shortest setting operators commonly run.
 */

const MASTER_NAME = 'sandgate-bench';
const DOWN_AFTER_MS = 1000;

export type BenchSentinel = Awaited<ReturnType<typeof startBenchSentinel>>;

/** after − before, per command, dropping commands that did not move. */
export function callDelta(before: ReadonlyMap<string, number>, after: ReadonlyMap<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [cmd, n] of after) {
    const d = n - (before.get(cmd) ?? 0);
    if (d !== 0) out[cmd] = d;
  }
  return out;
}

async function until(check: () => Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check().catch(() => false))) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

export async function startBenchSentinel(group: ProcessGroup) {
  const dir = mkdtempSync(join(tmpdir(), 'sandgate-bench-sentinel-'));
  const clients = new Map<number, Redis>();
  const client = (port: number): Redis => {
    let c = clients.get(port);
    if (c === undefined) {
      c = new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: 1, connectTimeout: 1000 });
      c.on('error', () => undefined);
      clients.set(port, c);
    }
    return c;
  };
  const data = new Map<number, Child>();
  const startData = async (extra: string[]): Promise<number> => {
    const port = await freePort();
    const nodeDir = mkdtempSync(join(dir, 'node-'));
    const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', nodeDir, '--repl-diskless-sync', 'yes', '--repl-diskless-sync-delay', '0', ...extra];
    data.set(port, group.program(`redis-${port}`, 'redis-server', args));
    await until(async () => (await client(port).ping()) === 'PONG', 10_000, `redis-server on ${port}`);
    return port;
  };
  const master = await startData([]);
  await startData(['--replicaof', '127.0.0.1', String(master)]);
  await until(async () => (await client(master).info('replication')).includes('state=online'), 10_000, 'the replica to sync');

  const sentinels: number[] = [];
  for (let i = 0; i < 3; i++) {
    const port = await freePort();
    const conf = join(dir, `sentinel-${i}.conf`);
    writeFileSync(
      conf,
      [`port ${port}`, 'bind 127.0.0.1', `dir ${dir}`, `sentinel monitor ${MASTER_NAME} 127.0.0.1 ${master} 2`, `sentinel down-after-milliseconds ${MASTER_NAME} ${DOWN_AFTER_MS}`, `sentinel failover-timeout ${MASTER_NAME} 5000`, ''].join('\n'),
    );
    const child = group.program(`redis-sentinel-${i}`, 'redis-server', [conf, '--sentinel']);
    await until(async () => (await client(port).ping()) === 'PONG', 10_000, `redis-sentinel on ${port}${child.running ? '' : ' (exited)'}`);
    sentinels.push(port);
  }
  await until(
    async () => {
      for (const p of sentinels) {
        const peers = (await client(p).call('SENTINEL', 'SENTINELS', MASTER_NAME)) as unknown[];
        const replicas = (await client(p).call('SENTINEL', 'REPLICAS', MASTER_NAME)) as unknown[];
        if (peers.length !== 2 || replicas.length !== 1) return false;
      }
      return true;
    },
    20_000,
    'the sentinels to discover each other',
  );
  const masterOf = async (p: number): Promise<number> => Number(((await client(p).call('SENTINEL', 'GET-MASTER-ADDR-BY-NAME', MASTER_NAME)) as string[])[1]);

  return {
    options: { sentinels: sentinels.map((port) => ({ host: '127.0.0.1', port })), name: MASTER_NAME },
    /** The data node the sentinels currently call master. */
    masterPort: () => masterOf(sentinels[0]!),
    async kill(port: number) {
      const child = data.get(port);
      if (child === undefined) throw new Error(`no data node on ${port}`);
      clients.get(port)?.disconnect();
      clients.delete(port);
      await child.stop('SIGKILL');
    },
    /** Resolves with the new master's port once every sentinel reports one other than `from`. */
    async switched(from: number, timeoutMs: number) {
      let to = from;
      await until(
        async () => {
          const ports = await Promise.all(sentinels.map(masterOf));
          to = ports[0]!;
          return ports.every((p) => p === to) && to !== from;
        },
        timeoutMs,
        'the sentinels to switch the master',
      );
      return to;
    },
    /** Calls per command on `port` since it started (INFO commandstats), without INFO itself. */
    async commandCalls(port: number) {
      const m = new Map<string, number>();
      for (const line of (await client(port).info('commandstats')).split('\n')) {
        const hit = /^cmdstat_([^:]+):calls=(\d+)/.exec(line.trim());
        if (hit !== null && hit[1] !== 'info') m.set(hit[1]!, Number(hit[2]));
      }
      return m;
    },
    hlen: (port: number, key: string) => client(port).hlen(key),
    close() {
      for (const c of clients.values()) c.disconnect();
    },
  };
}

import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { eventually } from './eventually.js';
import { freePort, startRedisServer, type RedisServer } from './redis-server.js';

/**
 * A Redis Cluster on loopback for one test: `masters` masters, each with `replicasPerMaster` replicas,
 * created by `redis-cli --cluster create`. Each node is its own redis-server in its own temp dir (its own
 * nodes.conf) on a free port. A small node timeout makes a replica take over a dead master in seconds.
 */
export interface RedisClusterGroup {
  readonly nodes: readonly RedisServer[];
  /** Seed nodes for `{"cluster": [...]}`. */
  readonly seeds: { host: string; port: number }[];
  /** The node currently serving `slot` as master. */
  ownerOf(slot: number): Promise<RedisServer>;
  /** The hash slot of a key (CLUSTER KEYSLOT). */
  slotOf(key: string): Promise<number>;
  /** Moves one slot and its keys from its owner to `to` (SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE). */
  migrate(slot: number, to: RedisServer): Promise<void>;
  stop(): Promise<void>;
}

const run = promisify(execFile);

/** A cluster node talks to the others on its port plus this (Redis's cluster bus). */
const CLUSTER_BUS_OFFSET = 10_000;

/**
 * `requireFullCoverage: false` (`cluster-require-full-coverage no`) lets the masters that still hold their
 * slots serve while another master's slots have no owner; by default Redis stops the whole cluster
 * (CLUSTERDOWN) until a replica takes over.
 */
export async function startRedisCluster(o: { masters?: number; replicasPerMaster?: number; nodeTimeoutMs?: number; requireFullCoverage?: boolean } = {}): Promise<RedisClusterGroup> {
  const masters = o.masters ?? 3;
  const replicas = o.replicasPerMaster ?? 0;
  const args = ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', String(o.nodeTimeoutMs ?? 1000), '--repl-diskless-sync', 'yes', '--repl-diskless-sync-delay', '0'];
  if (o.requireFullCoverage === false) args.push('--cluster-require-full-coverage', 'no');
  const nodes: RedisServer[] = [];
  for (let i = 0; i < masters * (1 + replicas); i++) nodes.push(await startRedisServer({ port: await freePort(CLUSTER_BUS_OFFSET), args }));
  await run('redis-cli', ['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`), '--cluster-replicas', String(replicas), '--cluster-yes']);
  await eventually(
    async () => {
      for (const n of nodes) if (!(await n.admin().call('CLUSTER', 'INFO') as string).includes('cluster_state:ok')) return false;
      // Every replica has finished its first sync.
      const online = await Promise.all(nodes.map(async (n) => ((await n.admin().info('replication')).match(/state=online/g) ?? []).length));
      return online.reduce((a, b) => a + b, 0) === masters * replicas;
    },
    15_000,
    'the cluster to be ok',
  );
  const id = async (n: RedisServer): Promise<string> => (await n.admin().call('CLUSTER', 'MYID')) as string;

  const ownerOf = async (slot: number): Promise<RedisServer> => {
    for (const n of nodes) {
      const ranges = (await n.admin().call('CLUSTER', 'SLOTS').catch(() => [])) as [number, number, [string, number, string]][];
      for (const [from, to, [, port]] of ranges) {
        if (slot >= from && slot <= to) {
          const owner = nodes.find((x) => x.port === Number(port));
          if (owner !== undefined) return owner;
        }
      }
    }
    throw new Error(`no node serves slot ${slot}`);
  };

  return {
    nodes,
    seeds: nodes.map((n) => ({ host: '127.0.0.1', port: n.port })),
    ownerOf,
    slotOf: async (key) => Number(await nodes[0]!.admin().call('CLUSTER', 'KEYSLOT', key)),
    async migrate(slot, to) {
      const from = await ownerOf(slot);
      const [fromId, toId] = [await id(from), await id(to)];
      await to.admin().call('CLUSTER', 'SETSLOT', String(slot), 'IMPORTING', fromId);
      await from.admin().call('CLUSTER', 'SETSLOT', String(slot), 'MIGRATING', toId);
      for (;;) {
        const keys = (await from.admin().call('CLUSTER', 'GETKEYSINSLOT', String(slot), '100')) as string[];
        if (keys.length === 0) break;
        await from.admin().call('MIGRATE', '127.0.0.1', String(to.port), '', '0', '5000', 'REPLACE', 'KEYS', ...keys);
      }
      for (const n of [to, from, ...nodes.filter((x) => x !== to && x !== from)]) {
        await n.admin().call('CLUSTER', 'SETSLOT', String(slot), 'NODE', toId).catch(() => undefined);
      }
    },
    async stop() {
      for (const n of nodes) n.resume();
      await Promise.all(nodes.map((n) => n.stop()));
    },
  };
}

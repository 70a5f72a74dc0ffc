import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SupervisorClient } from '../../src/sessions/supervisor-client.js';
import { mintSupervisorToken, type SupervisorKeys } from '../../src/sessions/supervisor-token.js';
import { clusterFiles, redisPresenceArgs, startGatewayProcess, TEST_SECRET, type GatewayProcess } from '../helpers/gateway-process.js';
import { eventually } from '../helpers/eventually.js';
import { freePort } from '../helpers/redis-server.js';
import { startSentinelGroup, type SentinelGroup } from '../helpers/redis-sentinel.js';
import { prng } from '../helpers/prng.js';
import { presenceKeys } from '../../src/sessions/presence/redis-scripts.js';

/**
 * Chaos: a seeded, reproducible random sequence of supervisor connects and disconnects, gateway kills
 * (kill -9, then a restart at once or once its lease lapsed), gateway pauses (SIGSTOP until its lease has
 * lapsed in Redis, then SIGCONT) and Redis failovers. Redis is Sentinel-managed (a master, a replica,
 * three sentinels); a failover is forced with SENTINEL FAILOVER, half of the time right after the replica
 * was made to miss the latest writes (CLIENT PAUSE WRITE on the replica), so the promoted replica may be
 * behind. After each step settles, on every
 * gateway: no sandbox is Ready without a live session, every live session's sandbox is Ready, all
 * gateways agree (same phase, same owning gateway), and no epoch was ever seen under two sessions.
 *
 * Reproduce a failure with CHAOS_SEED=<seed printed in the failure>.
 */

const SEED = Number(process.env.CHAOS_SEED ?? 20261121);
const STEPS = 14;
const TTL = 1000;
const keys: SupervisorKeys = { keys: [{ kid: 'default', secret: new TextEncoder().encode(TEST_SECRET) }], audience: 'sandgate-supervisor' };
const NAMES = ['web', 'api', 'db'] as const;
const IDS = ['A', 'B', 'C'] as const;

let redis: SentinelGroup;
/** sandbox@epoch → the session ids seen holding it: an epoch handed out twice shows as two. */
const epochs = new Map<string, Set<string>>();
let files: { sandboxes: string; secret: string };
const ports = new Map<string, number>();
const live = new Map<string, GatewayProcess>();
const clients = new Map<string, SupervisorClient>();

async function startGateway(id: string): Promise<void> {
  const g = await startGatewayProcess(id, [
    ...redisPresenceArgs(files, redis.options, TTL),
    '--supervisor-port', String(ports.get(id)),
  ]);
  live.set(id, g);
}

async function startClient(name: string, offset: number): Promise<void> {
  const order = IDS.map((_, i) => IDS[(i + offset) % IDS.length]!);
  const c = new SupervisorClient({
    gateway: order.map((id) => `ws://127.0.0.1:${ports.get(id)}`),
    token: await mintSupervisorToken(keys, 'team-a', name, 3600),
    namespace: 'team-a',
    name,
    instanceId: `chaos-${name}`,
    backoff: { initialMs: 20, maxMs: 300 },
  });
  clients.set(name, c.start());
}

/**
 * What every gateway must show once the cluster has settled. Safety (never Ready without a session, no
 * epoch under two sessions) is asserted on every observation, settled or not; the rest (Ready ⇔ live
 * session, one live owner every gateway agrees on) is what the cluster converges to within 12 s. Every
 * failure names the seed and the steps so far.
 */
async function settled(step: string): Promise<void> {
  const why = (what: string): string => `seed ${SEED}, after ${step}: ${what}`;
  const observe = async (): Promise<string[]> => {
    const views = await Promise.all(
      [...live.values()].map(async (g) => ({ id: g.id, sandboxes: await Promise.all(NAMES.map((n) => g.sandbox('team-a', n))) })),
    );
    const unsettled: string[] = [];
    for (const [i, name] of NAMES.entries()) {
      const wantReady = clients.has(name);
      const owners = new Set<string>();
      for (const v of views) {
        const s = v.sandboxes[i];
        if (s === undefined) {
          unsettled.push(`${v.id} unreachable`);
          continue;
        }
        expect(s.phase === 'Ready' && s.session === null, why(`${v.id}: ${name} Ready without a session`)).toBe(false);
        if (s.session !== null) {
          const { epoch, sessionId } = s.session;
          const seen = epochs.get(`${name}@${epoch}`) ?? new Set<string>();
          seen.add(sessionId);
          epochs.set(`${name}@${epoch}`, seen);
          expect([...seen], why(`epoch ${epoch} of ${name} handed out to one session only`)).toHaveLength(1);
        }
        if ((s.phase === 'Ready') !== wantReady) unsettled.push(`${v.id}: ${name} is ${s.phase}, want ${wantReady ? 'Ready' : 'not Ready'}`);
        owners.add(s.session?.gatewayId ?? '-');
      }
      if (owners.size > 1) unsettled.push(`gateways disagree on ${name}'s owner: ${[...owners].join(', ')}`);
      if (wantReady && !live.has([...owners][0] ?? '')) unsettled.push(`${name} owned by a dead gateway ${[...owners][0]}`);
    }
    return unsettled;
  };
  let unsettled: string[] = [];
  await eventually(async () => (unsettled = await observe()).length === 0, 12_000, () => why(`every gateway to show Ready ⇔ a live session and one live owner they agree on; last seen: ${unsettled.join('; ')}`));
}

/** Resolves once gateway `id`'s lease has expired by the current master's clock (or is gone). */
async function leaseLapsed(id: string): Promise<void> {
  await eventually(
    async () => {
      try {
        const admin = (await redis.master()).admin();
        const [score, [sec, usec]] = await Promise.all([admin.zscore(presenceKeys('sandgate').gateways, id), admin.time()]);
        return score === null || Number(score) <= Number(sec) * 1000 + Math.floor(Number(usec) / 1000);
      } catch {
        return false;
      }
    },
    15_000,
    `${id}'s lease to lapse in Redis`,
  );
}

beforeAll(async () => {
  redis = await startSentinelGroup();
  files = clusterFiles(`sandboxes:\n${NAMES.map((n) => `  - {namespace: team-a, name: ${n}, address: 127.0.0.1}`).join('\n')}\n`);
  for (const id of IDS) ports.set(id, await freePort());
  for (const id of IDS) await startGateway(id);
});

afterAll(async () => {
  for (const c of clients.values()) c.stop();
  for (const g of live.values()) {
    g.signal('SIGCONT');
    g.signal('SIGKILL');
    await g.exited();
  }
  await redis.stop();
});

/** Forces a Sentinel failover; with `lose`, the replica first stops applying the replication stream. */
async function failover(lose: boolean): Promise<void> {
  const master = await redis.master();
  const replica = redis.nodes.find((n) => n !== master)!;
  // The demoted master of the previous failover must be an in-sync replica before the next one.
  await eventually(async () => (await master.admin().info('replication')).includes('state=online'), 30_000, 'an online replica');
  if (lose) await replica.admin().call('CLIENT', 'PAUSE', '300', 'WRITE');
  await eventually(
    async () => {
      const port = redis.sentinelPorts[0]!;
      const s = new Redis(port, '127.0.0.1', { lazyConnect: true, maxRetriesPerRequest: 1 });
      s.on('error', () => undefined);
      try {
        await s.connect();
        return (await s.call('SENTINEL', 'FAILOVER', redis.name)) === 'OK';
      } catch {
        return false;
      } finally {
        s.disconnect();
      }
    },
    10_000,
    'SENTINEL FAILOVER to be accepted',
  );
  await redis.switched(master.port);
}

describe('chaos (seeded)', () => {
  it(`keeps Ready ⇔ live session on every gateway through ${STEPS} random faults (seed ${SEED})`, { timeout: 240_000 }, async () => {
    const rand = prng(SEED);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
    const log: string[] = [];
    for (let step = 0; step < STEPS; step++) {
      const roll = rand();
      let what: string;
      const idle = NAMES.filter((n) => !clients.has(n));
      const running = NAMES.filter((n) => clients.has(n));
      if (roll < 0.35 && idle.length > 0) {
        const name = pick(idle);
        await startClient(name, Math.floor(rand() * IDS.length));
        what = `connect ${name}`;
      } else if (roll < 0.5 && running.length > 0) {
        const name = pick(running);
        clients.get(name)!.stop();
        clients.delete(name);
        what = `disconnect ${name}`;
      } else if (roll < 0.7) {
        const id = pick(IDS);
        const g = live.get(id)!;
        g.signal('SIGKILL');
        await g.exited();
        live.delete(id);
        // Restarted while its old lease still holds, or after it lapsed (its records then collectable).
        const late = rand() < 0.5;
        if (late) await leaseLapsed(id);
        await startGateway(id);
        what = `kill -9 ${id} and restart ${late ? 'after its lease lapsed' : 'at once'}`;
      } else if (roll < 0.85) {
        const id = pick(IDS);
        const g = live.get(id)!;
        g.signal('SIGSTOP');
        await leaseLapsed(id);
        g.signal('SIGCONT');
        what = `SIGSTOP ${id} until its lease lapsed, then SIGCONT`;
      } else {
        const lose = rand() < 0.5;
        await failover(lose);
        what = lose ? 'Redis failover to a replica that missed the latest writes' : 'Redis failover';
      }
      log.push(`${step}: ${what}`);
      await settled(log.join(' → '));
    }
  });
});

import { request } from 'node:http';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SupervisorClient } from '../../src/sessions/supervisor-client.js';
import { mintSupervisorToken, type SupervisorKeys } from '../../src/sessions/supervisor-token.js';
import { clusterFiles, redisPresenceArgs, startGatewayProcess, TEST_SECRET, type GatewayProcess } from '../helpers/gateway-process.js';
import { eventually } from '../helpers/eventually.js';
import { type RedisServer } from '../helpers/redis-server.js';
import { startSentinelGroup, type SentinelGroup } from '../helpers/redis-sentinel.js';

/**
 * Two gateway processes on a Sentinel-managed Redis (master, replica, three sentinels), supervisors
 * connected to both. The master is killed (-9), or paused (SIGSTOP) past the failover and then let back
 * as a stale master. Throughout, a watcher reads both gateways' sandbox status, HTTP authz decisions and
 * /readyz every few milliseconds and records anything that breaks the invariants.
 *
 * Every live session comes back Ready on every gateway after the sentinels agree on the new master. How
 * long that takes (reconnect backoff ≤ 2 s, one renewal, a seal, a re-scan: docs/presence.md) is the
 * redis-ha benchmark's figure; here the wait only turns a hang into a failure, since a loaded machine
 * stretches any wall-clock bound.
 */

const TTL = 1000;
const RECOVERY_WAIT_MS = 20_000;
const keys: SupervisorKeys = { keys: [{ kid: 'default', secret: new TextEncoder().encode(TEST_SECRET) }], audience: 'sandgate-supervisor' };
const LIVE = { web: 'A', api: 'B', db: 'A' } as const;
const NAMES = [...Object.keys(LIVE), 'gone'] as const;

let group: SentinelGroup;
let files: { sandboxes: string; secret: string };
const gateways: GatewayProcess[] = [];
const clients: SupervisorClient[] = [];

beforeEach(async () => {
  group = await startSentinelGroup();
  files = clusterFiles(`sandboxes:\n${NAMES.map((n) => `  - {namespace: team-a, name: ${n}, address: 127.0.0.1, state: ready}`).join('\n')}\n`);
}, 30_000);

afterEach(async () => {
  for (const c of clients.splice(0)) c.stop();
  for (const g of gateways.splice(0)) {
    g.signal('SIGKILL');
    await g.exited();
  }
  await group.stop();
});

async function gateway(id: string): Promise<GatewayProcess> {
  const g = await startGatewayProcess(id, [
    ...redisPresenceArgs(files, group.options, TTL),
  ]);
  gateways.push(g);
  return g;
}

async function supervisor(name: string, to: GatewayProcess): Promise<SupervisorClient> {
  const c = new SupervisorClient({
    gateway: [to.supervisorUrl],
    token: await mintSupervisorToken(keys, 'team-a', name, 3600),
    namespace: 'team-a',
    name,
    instanceId: `inst-${name}`,
    backoff: { initialMs: 20, maxMs: 200 },
  });
  clients.push(c);
  await new Promise((resolve) => c.once('accepted', resolve).start());
  return c;
}

/** The HTTP authz decision a gateway makes for team-a/<name> (a routing decision read from its view). */
function authz(g: GatewayProcess, name: string): Promise<number> {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port: g.adminPort, path: '/authz/', headers: { host: `8000-${name}.team-a.localhost` }, agent: false, timeout: 1000 }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', () => resolve(0));
    req.on('timeout', () => req.destroy());
    req.end();
  });
}

interface Watch {
  readonly problems: string[];
  /** Per gateway: did /readyz say degraded, and was a live sandbox routed (authz 200) while it did? */
  readonly degradedSeen: Set<string>;
  readonly routedWhileDegraded: Set<string>;
  /** sandbox/epoch → the session ids seen holding it. */
  readonly epochs: Map<string, Set<string>>;
  stop(): Promise<void>;
}

function watch(gs: readonly GatewayProcess[]): Watch {
  const w: Watch = { problems: [], degradedSeen: new Set(), routedWhileDegraded: new Set(), epochs: new Map(), stop: async () => undefined };
  let running = true;
  const loop = (async () => {
    while (running) {
      await Promise.all(
        gs.map(async (g) => {
          const ready = (await fetch(`${g.admin}/readyz`, { signal: AbortSignal.timeout(1000) }).then((r) => r.json() as Promise<{ status: string }>, () => undefined))?.status;
          if (ready === 'degraded') w.degradedSeen.add(g.id);
          for (const name of NAMES) {
            const s = await g.sandbox('team-a', name);
            if (s?.session != null) {
              const key = `${name}@${s.session.epoch}`;
              const seen = w.epochs.get(key) ?? new Set<string>();
              seen.add(s.session.sessionId);
              w.epochs.set(key, seen);
            }
            if (name === 'gone' && s?.phase === 'Ready') w.problems.push(`${g.id}: gone is Ready`);
          }
          const [gone, web] = await Promise.all([authz(g, 'gone'), authz(g, 'web')]);
          if (gone === 200) w.problems.push(`${g.id}: routed a request to gone`);
          if (ready === 'degraded' && web === 200) w.routedWhileDegraded.add(g.id);
        }),
      );
    }
  })();
  w.stop = async () => {
    running = false;
    await loop;
  };
  return w;
}

/** Two gateways, the live supervisors, and `gone` connected then disconnected (its release replicated). */
async function cluster(): Promise<GatewayProcess[]> {
  const gs = [await gateway('A'), await gateway('B')];
  const byId = (id: string): GatewayProcess => gs.find((g) => g.id === id)!;
  for (const [name, id] of Object.entries(LIVE)) await supervisor(name, byId(id));
  const gone = await supervisor('gone', byId('B'));
  await allReady(gs, 10_000);
  gone.stop();
  await eventually(async () => (await Promise.all(gs.map((g) => g.sandbox('team-a', 'gone')))).every((s) => s?.phase !== 'Ready'), 5000, 'gone to leave');
  return gs;
}

async function allReady(gs: readonly GatewayProcess[], timeoutMs: number): Promise<void> {
  let last = '';
  try {
    await eventually(
      async () => {
        const seen: string[] = [];
        for (const g of gs) {
          for (const [name, owner] of Object.entries(LIVE)) {
            const s = await g.sandbox('team-a', name);
            if (s?.phase !== 'Ready' || s.session?.gatewayId !== owner) seen.push(`${g.id}: ${name} ${s?.phase}/${s?.session?.gatewayId}`);
          }
          const r = (await fetch(`${g.admin}/readyz`, { signal: AbortSignal.timeout(1000) }).then((x) => x.json(), () => ({ status: 'unreachable' }))) as { status: string; degraded?: string[] };
          if (r.status !== 'ready') seen.push(`${g.id}: readyz ${r.status} ${r.degraded?.join('; ') ?? ''}`);
        }
        last = seen.join(', ');
        return seen.length === 0;
      },
      timeoutMs,
      'every live session Ready on every gateway, and /readyz ready',
    );
  } catch (err) {
    throw new Error(`${(err as Error).message}; last seen: ${last}`);
  }
}

function expectUniqueEpochs(w: Watch): void {
  const reused = [...w.epochs].filter(([, ids]) => ids.size > 1).map(([k, ids]) => `${k}: ${[...ids].join(', ')}`);
  expect(reused).toEqual([]);
}

describe('presence through a Sentinel failover (gateway processes)', () => {
  it('kill -9 of the master: degraded while it lasts, routing from the mirror, no false Ready, every session Ready again, no epoch reused', { timeout: 75_000 }, async () => {
    const gs = await cluster();
    const master = await group.master();
    const w = watch(gs);
    try {
      await master.kill();
      await group.switched(master.port);
      await allReady(gs, RECOVERY_WAIT_MS);
    } finally {
      await w.stop();
    }
    expect(w.problems).toEqual([]);
    expect([...w.degradedSeen].sort()).toEqual(['A', 'B']);
    expect([...w.routedWhileDegraded].sort()).toEqual(['A', 'B']);
    expectUniqueEpochs(w);
    // A supervisor connecting after the failover is claimed on the new master, in the new term.
    await supervisor('gone', gs[0]!);
    await eventually(async () => (await gs[1]!.sandbox('team-a', 'gone'))?.phase === 'Ready', 15_000, 'a new claim to reach B');
    expect((await gs[1]!.sandbox('team-a', 'gone'))?.session?.epoch).toBeGreaterThan(2 ** 32);
  });

  it('SIGSTOP of the master past the failover, then SIGCONT: the stale master is demoted and no gateway writes to it', { timeout: 75_000 }, async () => {
    const gs = await cluster();
    const old: RedisServer = await group.master();
    const w = watch(gs);
    try {
      old.pause();
      await group.switched(old.port);
      await allReady(gs, RECOVERY_WAIT_MS);
      old.resume();
      const probe = old.admin();
      const calls = async (): Promise<number> => Number(/cmdstat_evalsha:calls=(\d+)/.exec(await probe.info('commandstats'))?.[1] ?? 0);
      // What the gateways sent before they noticed the failover ran as the server resumed (bytes already in
      // its sockets); from here on nothing may reach it.
      const before = await calls();
      // The sentinels turn a returning master into a replica of the new one once it has reported itself
      // as master for a while (Sentinel waits about 8 s), so the stale master serves as a master meanwhile.
      await eventually(async () => (await probe.info('replication').catch(() => '')).includes('role:slave'), 20_000, 'the old master to be demoted');
      expect(await calls()).toBe(before);
      const names = ((await probe.call('CLIENT', 'LIST')) as string).split('\n').map((l) => /name=(\S*)/.exec(l)?.[1] ?? '');
      expect(names.filter((n) => n.startsWith('sandgate-'))).toEqual([]);
      await allReady(gs, 1000);
    } finally {
      await w.stop();
    }
    expect(w.problems).toEqual([]);
    expect([...w.degradedSeen].sort()).toEqual(['A', 'B']);
    expectUniqueEpochs(w);
  });
});

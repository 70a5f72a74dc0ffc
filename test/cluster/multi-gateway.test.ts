import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { SupervisorClient } from '../../src/sessions/supervisor-client.js';
import { SUBPROTOCOL } from '../../src/sessions/supervisor-protocol.js';
import { mintSupervisorToken, type SupervisorKeys } from '../../src/sessions/supervisor-token.js';
import { eventually } from '../helpers/eventually.js';
import { clusterFiles, startGatewayProcess, TEST_SECRET, type GatewayProcess } from '../helpers/gateway-process.js';
import { freePort, startRedisServer, type RedisServer } from '../helpers/redis-server.js';

/**
 * Several gateway processes sharing presence through a real redis-server: a sandbox is Ready on every
 * gateway exactly while a live supervisor session exists on one of them.
 */

const TTL = 1000;
const RESCAN = 500;
const HEARTBEAT = 200;
const keys: SupervisorKeys = { keys: [{ kid: 'default', secret: new TextEncoder().encode(TEST_SECRET) }], audience: 'sandgate-supervisor' };
const SANDBOXES = `sandboxes:
  - {namespace: team-a, name: web, address: 127.0.0.1, state: ready}
  - {namespace: team-a, name: api, address: 127.0.0.1, state: ready}
`;

let redis: RedisServer;
let files: { sandboxes: string; secret: string };
const gateways: GatewayProcess[] = [];
const clients: SupervisorClient[] = [];

async function gateway(id: string, supervisorPort?: number): Promise<GatewayProcess> {
  const g = await startGatewayProcess(id, [
    '--sandboxes',
    files.sandboxes,
    '--supervisor-secret-file',
    files.secret,
    '--presence',
    redis.url,
    '--lease-ttl-ms',
    String(TTL),
    '--presence-rescan-ms',
    String(RESCAN),
    '--heartbeat-interval-ms',
    String(HEARTBEAT),
    '--readiness-wait-ms',
    '0',
    '--log-level',
    'info',
    ...(supervisorPort === undefined ? [] : ['--supervisor-port', String(supervisorPort)]),
  ]);
  gateways.push(g);
  return g;
}

async function supervisor(name: string, to: GatewayProcess[], instanceId = 'i-1'): Promise<SupervisorClient> {
  const c = new SupervisorClient({
    gateway: to.map((g) => g.supervisorUrl),
    token: await mintSupervisorToken(keys, 'team-a', name, 3600),
    namespace: 'team-a',
    name,
    instanceId,
    backoff: { initialMs: 20, maxMs: 200 },
  });
  clients.push(c);
  return c;
}

async function connected(c: SupervisorClient): Promise<void> {
  await new Promise((resolve) => c.once('accepted', resolve).start());
}

/** Waits until `g` reports `phase` (and owner) for team-a/`name`; returns how long it took. */
async function phaseOn(g: GatewayProcess, name: string, phase: string, owner?: string, timeoutMs = 8000): Promise<number> {
  const t0 = Date.now();
  let last: unknown;
  await eventually(
    async () => {
      const s = await g.sandbox('team-a', name);
      last = s;
      return s !== undefined && s.phase === phase && (owner === undefined || s.session?.gatewayId === owner);
    },
    timeoutMs,
    () => `${g.id}: team-a/${name} to reach ${phase}${owner ? ` owned by ${owner}` : ''}; last: ${JSON.stringify(last)}`,
  );
  return Date.now() - t0;
}

beforeAll(async () => {
  redis = await startRedisServer();
  files = clusterFiles(SANDBOXES);
});

afterEach(async () => {
  for (const c of clients.splice(0)) c.stop();
  for (const g of gateways.splice(0)) {
    g.signal('SIGCONT');
    g.signal('SIGKILL');
    await g.exited();
  }
  await redis.admin().flushall();
});

afterAll(async () => {
  await redis.stop();
});

describe('presence across gateways (real Redis, gateway processes)', () => {
  it('a session on B makes the sandbox Ready on A, and A shows the owning gateway', async () => {
    const [a, b] = [await gateway('A'), await gateway('B')];
    expect(await a.sandbox('team-a', 'web')).toMatchObject({ phase: 'Provisioning', reason: 'SupervisorNotConnected' });
    await connected(await supervisor('web', [b]));
    await phaseOn(a, 'web', 'Ready', 'B');
    await phaseOn(b, 'web', 'Ready', 'B');
  });

  it('kill -9 of the owning gateway: the others show Provisioning within about one lease TTL; reconnecting to A makes it Ready', async () => {
    const [a, b] = [await gateway('A'), await gateway('B')];
    const onB = await supervisor('web', [b]);
    await connected(onB);
    await phaseOn(a, 'web', 'Ready', 'B');
    b.signal('SIGKILL');
    await b.exited();
    onB.stop();
    const took = await phaseOn(a, 'web', 'Provisioning');
    expect((await a.sandbox('team-a', 'web'))?.reason).toBe('SupervisorNotConnected');
    // The lease lapses at most one TTL after B's last renewal; A notices on its next lease round (TTL/3).
    expect(took).toBeLessThan(TTL + TTL / 3 + 500);
    await connected(await supervisor('web', [a]));
    await phaseOn(a, 'web', 'Ready', 'A');
  });

  it("SIGSTOP A while its supervisor moves to B, then SIGCONT A: A's stale cleanup does not remove B's record", async () => {
    const [a, b] = [await gateway('A'), await gateway('B')];
    const onA = await supervisor('web', [a], 'old');
    await connected(onA);
    await phaseOn(b, 'web', 'Ready', 'A');
    a.signal('SIGSTOP');
    onA.stop();
    await connected(await supervisor('web', [b], 'new'));
    await phaseOn(b, 'web', 'Ready', 'B');
    // A stays paused past its lease TTL, then resumes with a stale socket and a stale lease.
    await new Promise((r) => setTimeout(r, TTL + 300));
    a.signal('SIGCONT');
    // Give A time to run its sweep (closing the dead socket), renew its lease and re-scan.
    await new Promise((r) => setTimeout(r, 3 * HEARTBEAT + RESCAN + 300));
    for (const g of [a, b]) {
      const s = await g.sandbox('team-a', 'web');
      expect(s, g.id).toMatchObject({ phase: 'Ready', session: { gatewayId: 'B' } });
    }
  });

  it('a Redis restart (empty) heals within one re-scan: gateways re-assert their sessions', async () => {
    const [a, b] = [await gateway('A'), await gateway('B')];
    await connected(await supervisor('web', [a]));
    await connected(await supervisor('api', [b]));
    await phaseOn(b, 'web', 'Ready', 'A');
    await phaseOn(a, 'api', 'Ready', 'B');
    await redis.kill();
    // While Redis is down: still serving from the mirror, /readyz 200 but degraded, with the reason.
    let ready: { status: string; degraded: string[] } | undefined;
    try {
      await eventually(
        async () => {
          const res = await fetch(`${a.admin}/readyz`);
          ready = (await res.json()) as { status: string; degraded: string[] };
          if (ready.status === 'degraded') expect(res.status).toBe(200);
          return ready.status === 'degraded';
        },
        5000,
        () => `/readyz to say degraded; last: ${JSON.stringify(ready)}`,
      );
      // "presence store redis unreachable: …" or "presence store subscription down: …", whichever it noticed first.
      expect(ready?.degraded.join(' ')).toMatch(/^presence store /);
      expect(await a.sandbox('team-a', 'web')).toMatchObject({ phase: 'Ready' });
    } finally {
      await redis.restart();
    }
    const admin = redis.admin();
    expect(await admin.dbsize()).toBe(0);
    // Each gateway re-asserts its own session into the empty Redis...
    let records: Record<string, string> = {};
    await eventually(
      async () => Object.keys((records = await admin.hgetall('{sandgate}:presence'))).sort().join() === 'team-a/api,team-a/web',
      2 * RESCAN + 3000,
      () => `presence to be re-asserted; last: ${JSON.stringify(records)}`,
    );
    // ...and every gateway agrees on both, with the right owners.
    for (const g of [a, b]) {
      await phaseOn(g, 'web', 'Ready', 'A', 1000);
      await phaseOn(g, 'api', 'Ready', 'B', 1000);
    }
  });

  it('a supervisor that stops answering heartbeats is dropped within 3 intervals, on every gateway', async () => {
    const [a, b] = [await gateway('A'), await gateway('B')];
    // A raw client that completes hello and then never sends another frame (its process "hung").
    const token = await mintSupervisorToken(keys, 'team-a', 'web', 3600);
    const ws = new WebSocket(a.supervisorUrl + '/v1/supervisor', SUBPROTOCOL, { headers: { authorization: `Bearer ${token}` } });
    await new Promise((r) => ws.once('open', r));
    ws.send(JSON.stringify({ type: 'hello', namespace: 'team-a', name: 'web', instanceId: 'hung', version: 't' }));
    await phaseOn(b, 'web', 'Ready', 'A');
    const dropped = new Promise<number>((resolve) => ws.once('close', (code) => resolve(code)));
    const t0 = Date.now();
    expect(await dropped).toBe(4001);
    expect(Date.now() - t0).toBeLessThan(4 * HEARTBEAT + 300);
    await phaseOn(b, 'web', 'Provisioning', undefined, 2000);
  });

  it('SIGTERM of the owning gateway: supervisors move, the sandbox stays Ready throughout, owned by A well inside one TTL', async () => {
    const portB = await freePort();
    const [a, b] = [await gateway('A'), await gateway('B', portB)];
    const c = await supervisor('web', [b, a]);
    await connected(c);
    await phaseOn(a, 'web', 'Ready', 'B');
    const t0 = Date.now();
    b.signal('SIGTERM');
    // Watch A while the session moves: B keeps its record until A's claim is seen, so no gap opens.
    const seen: string[] = [];
    await eventually(
      async () => {
        const s = await a.sandbox('team-a', 'web');
        seen.push(`${s?.phase}/${s?.session?.gatewayId}`);
        return s?.session?.gatewayId === 'A';
      },
      5000,
      () => `A to own team-a/web; seen: ${seen.join(', ')}`,
    );
    const took = Date.now() - t0;
    expect(seen.at(-1)).toBe('Ready/A');
    expect(seen.filter((x) => !x.startsWith('Ready/'))).toEqual([]);
    expect(await b.exited()).toBe(0);
    expect(took).toBeLessThan(TTL);
  });
});

import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Redis } from 'ioredis';
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
/** Bounds every wait: only turns a hang into a failure, never a claim about speed (the benchmark measures that). */
const HANG_MS = 15_000;
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

/** Waits until `g` reports `phase` (and owner) for team-a/`name`. */
async function phaseOn(g: GatewayProcess, name: string, phase: string, owner?: string): Promise<void> {
  let last: unknown;
  await eventually(
    async () => {
      const s = await g.sandbox('team-a', name);
      last = s;
      return s !== undefined && s.phase === phase && (owner === undefined || s.session?.gatewayId === owner);
    },
    HANG_MS,
    () => `${g.id}: team-a/${name} to reach ${phase}${owner ? ` owned by ${owner}` : ''}; last: ${JSON.stringify(last)}`,
  );
}

/**
 * A gateway's lease as Redis holds it (docs/presence.md: `{sandgate}:gateways`, score = expiry in ms of
 * Redis TIME): `live`, `expired` (listed, past its expiry — only a renewal long after removes it), or
 * `gone` (deleted by the gateway's graceful `leave`).
 */
async function lease(admin: Redis, id: string): Promise<'live' | 'expired' | 'gone'> {
  const [expiry, [sec, usec]] = await Promise.all([admin.zscore('{sandgate}:gateways', id), admin.time()]);
  if (expiry === null) return 'gone';
  return Number(expiry) > Number(sec) * 1000 + Math.floor(Number(usec) / 1000) ? 'live' : 'expired';
}

/** Resolves once `g` has logged that its session of team-a/`name` ended (closed by it or by the peer). */
function sessionEnded(g: GatewayProcess, name: string): Promise<unknown> {
  return eventually(
    () => g.logs.some((l) => l.sandbox === `team-a/${name}` && (l.msg === 'supervisor session closed' || l.msg === 'supervisor disconnected')),
    HANG_MS,
    `${g.id} to log the end of its team-a/${name} session`,
  );
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

  it('kill -9 of the owning gateway: the others show Provisioning once its lease has expired, not before; reconnecting to A makes it Ready', async () => {
    const [a, b] = [await gateway('A'), await gateway('B')];
    const admin = redis.admin();
    const onB = await supervisor('web', [b]);
    await connected(onB);
    await phaseOn(a, 'web', 'Ready', 'B');
    b.signal('SIGKILL');
    await b.exited();
    onB.stop();
    await phaseOn(a, 'web', 'Provisioning');
    expect((await a.sandbox('team-a', 'web'))?.reason).toBe('SupervisorNotConnected');
    // A expires a peer's lease on its own clock from the remaining lifetime Redis reported, which can only
    // put the local expiry later than Redis's: so when A has dropped the session, Redis agrees the lease
    // is past its expiry. A dead gateway's lease is never deleted, only left to expire.
    expect(await lease(admin, 'B')).toBe('expired');
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
    // A stays paused until its lease has expired, then resumes with a stale socket and a stale lease.
    const admin = redis.admin();
    await eventually(async () => (await lease(admin, 'A')) === 'expired', HANG_MS, "A's lease to expire while A is stopped");
    a.signal('SIGCONT');
    // A ends its stale session (the peer's close, the heartbeat sweep or its lost re-assert, whichever it
    // runs first) and starts its release in the same turn; a renewal A sends after that reaches Redis
    // after the release, on the same connection.
    await sessionEnded(a, 'web');
    const before = await admin.zscore('{sandgate}:gateways', 'A');
    await eventually(async () => (await admin.zscore('{sandgate}:gateways', 'A')) !== before, HANG_MS, 'A to renew its lease after ending its stale session');
    expect(JSON.parse((await admin.hget('{sandgate}:presence', 'team-a/web')) ?? 'null')).toMatchObject({ g: 'B' });
    for (const g of [a, b]) await phaseOn(g, 'web', 'Ready', 'B');
  });

  it('a Redis restart (empty) heals: gateways re-assert their sessions and agree on the owners', async () => {
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
        HANG_MS,
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
      HANG_MS,
      () => `presence to be re-asserted; last: ${JSON.stringify(records)}`,
    );
    // ...and every gateway agrees on both, with the right owners.
    for (const g of [a, b]) {
      await phaseOn(g, 'web', 'Ready', 'A');
      await phaseOn(g, 'api', 'Ready', 'B');
    }
  });

  it('a supervisor that stops answering heartbeats is dropped (4001) after 3 silent intervals, on every gateway', async () => {
    const [a, b] = [await gateway('A'), await gateway('B')];
    // A raw client that completes hello and then never sends another frame (its process "hung").
    const token = await mintSupervisorToken(keys, 'team-a', 'web', 3600);
    const ws = new WebSocket(a.supervisorUrl + '/v1/supervisor', SUBPROTOCOL, { headers: { authorization: `Bearer ${token}` } });
    await new Promise((r) => ws.once('open', r));
    const dropped = new Promise<{ code: number; at: number }>((resolve) => ws.once('close', (code) => resolve({ code, at: Date.now() })));
    // The gateway counts silence from the last frame it read, the hello, so from no earlier than this.
    const lastFrame = Date.now();
    ws.send(JSON.stringify({ type: 'hello', namespace: 'team-a', name: 'web', instanceId: 'hung', version: 't' }));
    await phaseOn(b, 'web', 'Ready', 'A');
    const { code, at } = await dropped;
    expect(code).toBe(4001);
    // Order, not speed: a slow machine only delays the drop, so it can never come before 3 silent intervals.
    expect(at - lastFrame).toBeGreaterThanOrEqual(3 * HEARTBEAT);
    await phaseOn(b, 'web', 'Provisioning');
  });

  it('SIGTERM of the owning gateway: supervisors move, the sandbox stays Ready throughout, and B deletes its lease instead of letting it expire', async () => {
    const portB = await freePort();
    const [a, b] = [await gateway('A'), await gateway('B', portB)];
    const admin = redis.admin();
    const c = await supervisor('web', [b, a]);
    await connected(c);
    await phaseOn(a, 'web', 'Ready', 'B');
    b.signal('SIGTERM');
    // Watch A while the session moves: B keeps its record until A's claim is seen, so no gap opens.
    const seen: string[] = [];
    await eventually(
      async () => {
        const s = await a.sandbox('team-a', 'web');
        seen.push(`${s?.phase}/${s?.session?.gatewayId}`);
        return s?.session?.gatewayId === 'A';
      },
      HANG_MS,
      () => `A to own team-a/web; seen: ${seen.join(', ')}`,
    );
    expect(seen.at(-1)).toBe('Ready/A');
    expect(seen.filter((x) => !x.startsWith('Ready/'))).toEqual([]);
    expect(await b.exited()).toBe(0);
    // The session moved by A's claim and B's graceful leave, not by B's lease running out: the lease is
    // deleted (an expired one stays listed), and B said so.
    expect(await lease(admin, 'B')).toBe('gone');
    // (Its last log lines may reach the pipe after the exit event.)
    await eventually(() => b.logs.some((l) => l.msg === 'presence released: lease and sessions deleted'), HANG_MS, 'B to log its graceful leave');
  });
});

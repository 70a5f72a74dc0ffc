import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Redis } from 'ioredis';
import type { RedisServer } from '../test/helpers/redis-server.js';
import { startSentinelGroup, type SentinelGroup } from '../test/helpers/redis-sentinel.js';
import { GrpcLoad } from './lib/grpc-load.js';
import { benchScript } from './lib/machine.js';
import { metricValue } from './lib/metrics.js';
import { sleep, type Child } from './lib/processes.js';
import { row, target, type Row } from './lib/report.js';
import { writeSandboxesFile } from './lib/sandboxes.js';
import { type BenchContext, type Section } from './lib/section.js';
import type { Accepted } from './lib/supervisor-swarm.js';
import { startGateway, TargetStartError, type Target } from './lib/targets.js';

/**
 * N sessions of reference supervisors (lib/supervisor-swarm.ts) on three gateways sharing presence on a
 * Sentinel group (master, replica, three sentinels). Commands per routed request are those during a
 * Check load on one gateway beyond the idle rate, over its decisions. Before the master's kill -9 a few
 * sessions close, and every gateway's Ready count is polled every 25 ms: a count above the live sessions
 * is a false Ready. A gateway's kill -9 ends when the next in its supervisors' list accepts its sessions.
 */

const GATEWAYS = 3;
const LEASE_TTL_MS = 10_000;
const TIMEOUT_MS = 120_000;
const PRESENCE_KEY = '{sandgate}:presence';
const LOAD_MS = 3_000;
/** Below one command per thousand requests, any per-request command would show as ≥ 1. */
const NOISE_PER_REQUEST = 0.001;
const TARGETS = ['0 false-Ready observations during a Sentinel failover', '0 Redis commands per routed request'];

function node(redis: SentinelGroup, port: number): RedisServer {
  const n = redis.nodes.find((x) => x.port === port);
  if (n === undefined) throw new Error(`no Redis node on ${port}`);
  return n;
}

/** One client per node for the whole section, so its own connecting never counts among the commands. */
const admins = new Map<number, Redis>();
function admin(redis: SentinelGroup, port: number): Redis {
  let a = admins.get(port);
  if (a === undefined) admins.set(port, (a = node(redis, port).admin()));
  return a;
}

/** Redis commands on the node at `port` since it started (INFO commandstats), INFO itself left out. */
async function commandCalls(redis: SentinelGroup, port: number): Promise<number> {
  const stats = await admin(redis, port).info('commandstats');
  return [...stats.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)].reduce((sum, [, cmd, calls]) => (cmd === 'info' ? sum : sum + Number(calls)), 0);
}

async function commandRate(redis: SentinelGroup, port: number, ms: number): Promise<number> {
  const before = await commandCalls(redis, port);
  await sleep(ms);
  return ((await commandCalls(redis, port)) - before) * 1000 / ms;
}

function skipped(reason: string) {
  return { baseline: '-', rows: [], targets: TARGETS.map((t) => target(t, undefined, `skipped: ${reason}`)), notes: [] };
}

async function readyz(g: Target): Promise<string> {
  try {
    const res = await fetch(`${g.adminUrl}/readyz`, { signal: AbortSignal.timeout(2000) });
    const body = (await res.json()) as { status: string; degraded: string[] };
    return body.status === 'degraded' ? `degraded (${body.degraded.join('; ')})` : body.status;
  } catch {
    return 'unreachable';
  }
}

function readyCount(g: Target): Promise<number> {
  return metricValue(g.adminUrl, 'sandgate_view_sandboxes_by_phase', { phase: 'Ready' });
}

/** Polls `probe` every 25 ms until `done` holds of its reading; after TIMEOUT_MS, throws what the last one was. */
async function poll<T>(probe: () => Promise<T>, done: (v: T) => boolean, what: (v: T) => string): Promise<T> {
  const deadline = Date.now() + TIMEOUT_MS;
  for (;;) {
    const v = await probe();
    if (done(v)) return v;
    if (Date.now() > deadline) throw new Error(`${what(v)} after ${TIMEOUT_MS} ms`);
    await sleep(25);
  }
}

/** Resolves when every one of `gateways` counts `n` Ready sandboxes (epoch ms). */
async function allReady(gateways: readonly Target[], n: number): Promise<number> {
  await poll(() => Promise.all(gateways.map(readyCount)), (r) => r.every((x) => x === n), (r) => `Ready sandboxes on ${gateways.map((g) => g.name).join(', ')}: ${r.join(', ')}, not ${n},`);
  return Date.now();
}

/** A swarm process holding sessions for sandboxes from … from+count-1 on `gateways` (the first, then the next). */
async function swarm(ctx: BenchContext, name: string, gateways: readonly Target[], secretFile: string, from: number, count: number): Promise<{ child: Child; startedAt: number }> {
  const child = ctx.procs.node(name, benchScript('lib/supervisor-swarm.js'), [], { execArgv: ['--max-old-space-size=4096'] });
  await child.ready();
  const startedAt = await child.request<number>('open', { gateways: gateways.map((g) => g.supervisorUrl), secretFile, from, count });
  return { child, startedAt };
}

/** Resolves when `n` of the swarms' sessions are up and were accepted since `sinceMs`, with when the last was (epoch ms). */
async function untilAccepted(swarms: readonly { child: Child }[], n: number, sinceMs: number): Promise<number> {
  const up = (seen: Accepted[]) => seen.reduce((sum, a) => sum + a.count, 0);
  const seen = await poll(
    () => Promise.all(swarms.map((s) => s.child.request<Accepted>('accepted', { sinceMs }))),
    (v) => up(v) >= n,
    (v) => `${up(v)} of ${n} sessions accepted (closes by code in each swarm: ${v.map((a) => JSON.stringify(a.closes)).join(', ')})`,
  );
  return Math.max(...seen.map((a) => a.lastAt));
}

export const redisHa: Section = {
  id: 'redis-ha',
  title: 'Redis HA (presence on Sentinel with 3 gateways: memory per session, failover, false Ready, commands/s and per request)',
  estimateSeconds: { quick: 50, full: 90 },
  async run(ctx: BenchContext) {
    const count = ctx.quick ? 1_000 : 10_000;
    const gone = Math.max(10, count / 100);
    const idleMs = ctx.quick ? 4_000 : 15_000;
    const secretFile = join(ctx.tmp, 'supervisor-secret');
    writeFileSync(secretFile, randomBytes(32).toString('hex') + '\n', { mode: 0o600 });
    const sandboxes = writeSandboxesFile(ctx.tmp, count + gone, 'required');
    // Sentinel declares a master down after 1 s, the shortest setting operators commonly run.
    const redis = await startSentinelGroup({ downAfterMs: 1000, failoverTimeoutMs: 5000 }).catch((err: Error) => err.message.split('\n')[0]!);
    if (typeof redis === 'string') return skipped(redis);
    try {
      const args = (i: number) => ['--supervisor-secret-file', secretFile, '--max-sessions-per-source', '1000000', '--presence', 'redis://127.0.0.1', '--gateway-id', `ha-${i}`, '--lease-ttl-ms', String(LEASE_TTL_MS), '--presence-redis-options', JSON.stringify(redis.options)];
      const gateways = await Promise.all(Array.from({ length: GATEWAYS }, (_, i) => startGateway(ctx.procs, { name: `sandgate-ha-${i}`, sandboxes, args: args(i) }, ctx.targetOptions))).catch((err: unknown) => {
        if (err instanceof TargetStartError) return err.reason;
        throw err;
      });
      if (typeof gateways === 'string') return skipped(gateways);
      const n = count.toLocaleString('en-US');
      const rows: Row[] = [];
      const master = await redis.masterPort();
      ctx.log(`redis-ha: idle, no sessions (${idleMs} ms)`);
      const idleEmpty = await commandRate(redis, master, idleMs);

      // A third of the sessions on each gateway, with the next gateway as their supervisors' second.
      ctx.log(`redis-ha: ${n} sessions on ${GATEWAYS} gateways`);
      const heapBefore = await Promise.all(gateways.map((g) => g.heap()));
      const per = Math.ceil(count / GATEWAYS);
      const swarms = await Promise.all(gateways.map((g, i) => swarm(ctx, `swarm-ha-${i}`, [g, gateways[(i + 1) % GATEWAYS]!], secretFile, i * per, Math.min(per, count - i * per))));
      await untilAccepted(swarms, count, 0);
      const connectMs = (await allReady(gateways, count)) - Math.min(...swarms.map((s) => s.startedAt));
      const heapAfter = await Promise.all(gateways.map((g) => g.heap()));
      const grown = (key: 'heapUsed' | 'rss') => heapAfter.reduce((sum, h, i) => sum + h[key] - heapBefore[i]![key], 0) / count;
      rows.push(row(`gateway heap per session @ ${n} sessions, ${GATEWAYS} gateways together`, 'B', grown('heapUsed'), undefined, 'after GC; each session is held by one gateway and mirrored by all'));
      rows.push(row(`gateway RSS per session @ ${n} sessions, ${GATEWAYS} gateways together`, 'B', grown('rss')));
      rows.push(row(`${n} sessions connect, all Ready on every gateway`, 'ms', connectMs));

      ctx.log(`redis-ha: idle, ${n} sessions on ${GATEWAYS} gateways (${idleMs} ms)`);
      const idleFull = await commandRate(redis, master, idleMs);
      rows.push(row(`Redis commands/s, ${n} idle sessions on ${GATEWAYS} gateways`, '/s', idleFull, idleEmpty, 'vs no sessions'));

      ctx.log(`redis-ha: Check load on one gateway over ${n} sandboxes`);
      const load = await GrpcLoad.start(ctx.procs, 1);
      const decided = () => metricValue(gateways[0]!.adminUrl, 'sandgate_edge_decisions_total', { door: 'ext_authz' });
      const [decisions0, calls0, t0load] = [await decided(), await commandCalls(redis, master), performance.now()];
      const checks = await load.run({ target: gateways[0]!.grpcTarget, kind: 'check', inFlight: 64, warmupMs: 0, durationMs: LOAD_MS, sandboxes: count });
      const elapsed = performance.now() - t0load;
      const during = (await commandCalls(redis, master)) - calls0;
      const decisions = (await decided()) - decisions0;
      const perRequest = Math.max(0, during - (idleFull * elapsed) / 1000) / Math.max(1, decisions);
      await load.stop();
      rows.push(row('Redis commands per routed request', '', perRequest, undefined, `${decisions} Checks at ${Math.round(checks.rps)} req/s, ${during} commands in ${Math.round(elapsed)} ms`));
      const perRequestTarget = target(TARGETS[1]!, perRequest < NOISE_PER_REQUEST && checks.errors === 0, `${perRequest.toFixed(4)} per request (${decisions} requests, ${checks.errors} errors, idle rate ${idleFull.toFixed(1)}/s)`);

      const leaving = await swarm(ctx, 'swarm-ha-gone', [gateways[0]!], secretFile, count, gone);
      await allReady(gateways, count + gone);
      await leaving.child.request('close');
      await allReady(gateways, count);

      ctx.log('redis-ha: kill -9 of the master');
      let falseReady = 0;
      let lowest = count;
      let polling = true;
      const poller = (async () => {
        while (polling) {
          for (const g of gateways) {
            const r = await readyCount(g).catch(() => count);
            if (r > count) falseReady++;
            lowest = Math.min(lowest, r);
          }
          await sleep(25);
        }
      })();
      const t0 = Date.now();
      let switchedMs: number;
      let recoveredMs: number;
      try {
        await node(redis, master).kill();
        const promoted = await redis.switched(master, TIMEOUT_MS);
        switchedMs = Date.now() - t0;
        await poll(
          async () => ({ states: await Promise.all(gateways.map(readyz)), records: await admin(redis, promoted).hlen(PRESENCE_KEY).catch(() => -1) }),
          (v) => v.states.every((s) => s === 'ready') && v.records === count,
          (v) => `not recovered: /readyz ${v.states.join(', ')}, ${v.records} records on the new master,`,
        );
        recoveredMs = Date.now() - t0;
      } finally {
        polling = false;
        await poller;
      }

      // A gateway's sessions reconnect to another after its kill -9, as the reference supervisor's do.
      const held = await metricValue(gateways[0]!.adminUrl, 'sandgate_sessions_active');
      ctx.log(`redis-ha: kill -9 of a gateway holding ${held} sessions`);
      const tg = Date.now();
      gateways[0]!.child.proc.kill('SIGKILL');
      const movedMs = Math.max(await untilAccepted(swarms, held, tg), await allReady(gateways.slice(1), count)) - tg;

      rows.push(row(`failover (kill -9 master) → all ${n} sessions re-asserted, /readyz ready`, 'ms', recoveredMs, switchedMs, 'vs the sentinels switching'));
      rows.push(row('false-Ready observations during the failover', '', falseReady, undefined, `${gone} sessions closed just before; Ready polled on ${GATEWAYS} gateways every 25 ms`));
      rows.push(row('lowest Ready count seen during the failover', '', lowest, count, `of ${n}: gateways route from their mirror`));
      rows.push(row(`gateway failover (kill -9 of a gateway) → its ${held} sessions accepted by another, all Ready`, 'ms', movedMs, LEASE_TTL_MS, 'vs the lease TTL'));
      return {
        baseline: 'see each row',
        rows,
        targets: [target(TARGETS[0]!, falseReady === 0, `${falseReady} observations; recovered ${recoveredMs} ms after kill -9 (sentinels switched after ${switchedMs} ms)`), perRequestTarget],
        notes: [`Redis HA: Sentinel down-after 1 s; lease TTL ${LEASE_TTL_MS} ms; commands/s measured on the master over ${idleMs} ms`],
      };
    } finally {
      admins.clear();
      await redis.stop();
    }
  },
};

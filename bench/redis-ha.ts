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
import { DEFAULTS } from '../src/config/schema.js';
import { rebalanceMargin } from '../src/sessions/rebalancer.js';

/**
 * N sessions of reference supervisors (lib/supervisor-swarm.ts) on three gateways sharing presence on a
 * Sentinel group (master, replica, three sentinels). Commands per routed request are those during a
 * Check load on one gateway beyond the idle rate, over its decisions. Before the master's kill -9 a few
 * sessions close, and every gateway's Ready count is polled every 25 ms: a count above the live sessions
 * is a false Ready. A gateway's kill -9 ends when the next in its supervisors' list accepts its sessions.
 * Then the service-level windows, each measured several times with the default lease TTL and heartbeats:
 * how long a killed gateway's sandboxes stay Ready on the others (their supervisors know only it), and
 * how long a frozen supervisor process (SIGSTOP) stays Ready. During the Check load, which holds the
 * gateway at full CPU, heartbeat drops (4001) on it are counted: each would be a false drop. Last, a
 * third gateway joins the two that hold the sessions, and the time until each holds its share is measured.
 */

const GATEWAYS = 3;
const TIMEOUT_MS = 120_000;
const PRESENCE_KEY = '{sandgate}:presence';
/** Sessions of the gateway killed, or the supervisor process frozen, in each round of the windows below. */
const VICTIM_SESSIONS = 100;
/** The service levels docs/presence.md states, with the defaults (lease TTL, heartbeat interval × misses). */
const FALSE_READY_BAR_MS = 3_000;
const FROZEN_BAR_MS = 8_000;
/** Below one command per thousand requests, any per-request command would show as ≥ 1. */
const NOISE_PER_REQUEST = 0.001;
const TARGETS = [
  '0 false-Ready observations during a Sentinel failover',
  '0 Redis commands per routed request',
  `false Ready after a gateway's kill -9 ≤ ${FALSE_READY_BAR_MS} ms (max over the kills)`,
  `a frozen supervisor leaves Ready ≤ ${FROZEN_BAR_MS} ms (max over the freezes)`,
  '0 heartbeat drops (4001) while the gateway runs at full CPU',
  'no sandbox leaves Ready while sessions are rebalanced to a joining gateway',
];

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

/** Nearest-rank percentile of `xs` (sorted ascending). */
function percentile(xs: readonly number[], p: number): number {
  return xs[Math.min(xs.length - 1, Math.max(0, Math.ceil((p / 100) * xs.length) - 1))]!;
}

/** p50, p99 and max of a window measured `rounds` times, as one row. */
function windowRow(measure: string, windows: readonly number[], bar: number, note: string): Row {
  const sorted = [...windows].sort((a, b) => a - b);
  return row(measure, 'ms', percentile(sorted, 50), bar, `p99 ${percentile(sorted, 99)} ms, max ${sorted.at(-1)} ms over ${sorted.length}; ${note}`);
}

/**
 * Polls every one of `gateways` every 10 ms from `t0` until each counts at most `n` Ready sandboxes;
 * returns when the last got there, in ms after `t0`: how long a sandbox nobody can reach was still Ready.
 */
async function readyUntil(gateways: readonly Target[], n: number, t0: number): Promise<number> {
  const at = await Promise.all(
    gateways.map(async (g) => {
      for (;;) {
        if ((await readyCount(g).catch(() => n + 1)) <= n) return Date.now() - t0;
        if (Date.now() - t0 > TIMEOUT_MS) throw new Error(`${g.name} still counts more than ${n} Ready after ${TIMEOUT_MS} ms`);
        await sleep(10);
      }
    }),
  );
  return Math.max(...at);
}

/**
 * A gateway joins two that hold `held` sessions: returns how long until each of the three holds its share
 * within the rebalancing margin (ms after it was ready), and the lowest Ready count any gateway showed
 * meanwhile (a sandbox leaving Ready because it moved would show there).
 */
async function rebalance(survivors: readonly Target[], held: number, join: () => Promise<Target>): Promise<{ convergedMs: number; lowestReady: number; counts: number[] }> {
  const joined = await join();
  const t0 = Date.now();
  const all = [...survivors, joined];
  const share = Math.ceil(held / all.length);
  const margin = rebalanceMargin(share);
  let lowestReady = held;
  for (;;) {
    const [counts, ready] = await Promise.all([Promise.all(all.map((g) => metricValue(g.adminUrl, 'sandgate_sessions_active'))), Promise.all(all.map(readyCount))]);
    lowestReady = Math.min(lowestReady, ...ready);
    if (counts.every((c) => Math.abs(c - share) <= margin)) return { convergedMs: Date.now() - t0, lowestReady, counts };
    if (Date.now() - t0 > TIMEOUT_MS) throw new Error(`sessions per gateway ${counts.join(' / ')} after ${TIMEOUT_MS} ms, not within ${margin} of ${share}`);
    await sleep(100);
  }
}

interface WindowsSetup {
  readonly ctx: BenchContext;
  /** The gateways that stay up, holding `held` Ready sessions between rounds. */
  readonly survivors: readonly Target[];
  readonly held: number;
  /** Sandbox index of the first victim session (sandboxes from there on are free). */
  readonly from: number;
  readonly secretFile: string;
  readonly rounds: number;
}

/**
 * False Ready after a gateway dies with its sandboxes: a third gateway joins, VICTIM_SESSIONS supervisors
 * that know only it connect, and it is killed -9. The window ends when no survivor counts them Ready.
 */
async function killWindows(w: WindowsSetup, start: (round: number) => Promise<Target>): Promise<number[]> {
  const windows: number[] = [];
  for (let r = 0; r < w.rounds; r++) {
    const victim = await start(r);
    const sw = await swarm(w.ctx, `swarm-ha-victim-${r}`, [victim], w.secretFile, w.from, VICTIM_SESSIONS);
    await allReady([...w.survivors, victim], w.held + VICTIM_SESSIONS);
    const t0 = Date.now();
    victim.child.proc.kill('SIGKILL');
    windows.push(await readyUntil(w.survivors, w.held, t0));
    await sw.child.stop('SIGKILL');
  }
  return windows;
}

/**
 * A frozen supervisor: VICTIM_SESSIONS supervisors in one process on the first survivor are stopped
 * (SIGSTOP: sockets open, nothing sent). The window ends when no gateway counts them Ready.
 */
async function freezeWindows(w: WindowsSetup): Promise<number[]> {
  const windows: number[] = [];
  for (let r = 0; r < w.rounds; r++) {
    const sw = await swarm(w.ctx, `swarm-ha-frozen-${r}`, [w.survivors[0]!], w.secretFile, w.from, VICTIM_SESSIONS);
    await allReady(w.survivors, w.held + VICTIM_SESSIONS);
    const t0 = Date.now();
    sw.child.proc.kill('SIGSTOP');
    windows.push(await readyUntil(w.survivors, w.held, t0));
    await sw.child.stop('SIGKILL');
  }
  return windows;
}

export const redisHa: Section = {
  id: 'redis-ha',
  title: 'Redis HA (presence on Sentinel with 3 gateways: memory per session, failover, false Ready, commands/s and per request)',
  estimateSeconds: { quick: 130, full: 260 },
  async run(ctx: BenchContext) {
    const count = ctx.quick ? 1_000 : 10_000;
    const gone = Math.max(10, count / 100);
    const idleMs = ctx.quick ? 4_000 : 15_000;
    // Longer than --heartbeat-misses intervals, so a drop caused by the load would show.
    const loadMs = ctx.quick ? 7_000 : 10_000;
    const rounds = ctx.quick ? 3 : 6;
    const secretFile = join(ctx.tmp, 'supervisor-secret');
    writeFileSync(secretFile, randomBytes(32).toString('hex') + '\n', { mode: 0o600 });
    const sandboxes = writeSandboxesFile(ctx.tmp, count + Math.max(gone, VICTIM_SESSIONS), 'required');
    // Sentinel declares a master down after 1 s, the shortest setting operators commonly run.
    const redis = await startSentinelGroup({ downAfterMs: 1000, failoverTimeoutMs: 5000 }).catch((err: Error) => err.message.split('\n')[0]!);
    if (typeof redis === 'string') return skipped(redis);
    try {
      // The lease TTL and heartbeats are the defaults: the service levels are stated for them.
      const args = (i: number | string) => ['--supervisor-secret-file', secretFile, '--max-sessions-per-source', '1000000', '--presence', 'redis://127.0.0.1', '--gateway-id', `ha-${i}`, '--presence-redis-options', JSON.stringify(redis.options)];
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
      rows.push(row(`Redis commands/s of the leases alone, ${GATEWAYS} gateways, no sessions`, '/s', idleEmpty, undefined, `lease TTL ${DEFAULTS.leaseTtlMs} ms renewed every TTL/3: one script per gateway per renewal`));

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
      const drops = () => metricValue(gateways[0]!.adminUrl, 'sandgate_sessions_closes_total', { code: '4001' });
      const [decisions0, calls0, drops0, cpu0, t0load] = [await decided(), await commandCalls(redis, master), await drops(), gateways[0]!.cpuMicrosNow(), performance.now()];
      const checks = await load.run({ target: gateways[0]!.grpcTarget, kind: 'check', inFlight: 64, warmupMs: 0, durationMs: loadMs, sandboxes: count });
      const elapsed = performance.now() - t0load;
      const cpuShare = (gateways[0]!.cpuMicrosNow() - cpu0) / 1000 / elapsed;
      const dropped = (await drops()) - drops0;
      const heldLoaded = await metricValue(gateways[0]!.adminUrl, 'sandgate_sessions_active');
      rows.push(row(`heartbeat drops (4001) on a gateway at full CPU, ${heldLoaded} sessions held`, '', dropped, undefined, `${Math.round(elapsed)} ms of Check load; the gateway used ${(cpuShare * 100).toFixed(0)} % of a core`));
      const dropsTarget = target(TARGETS[4]!, dropped === 0, `${dropped} drops over ${Math.round(elapsed)} ms at ${(cpuShare * 100).toFixed(0)} % of a core`);
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
      rows.push(row(`gateway failover (kill -9 of a gateway) → its ${held} sessions accepted by another, all Ready`, 'ms', movedMs, DEFAULTS.leaseTtlMs, 'vs the lease TTL'));

      // Two gateways hold the N sessions from here on; a third joins and is killed, or a supervisor process freezes.
      const setup: WindowsSetup = { ctx, survivors: gateways.slice(1), held: count, from: count, secretFile, rounds };
      ctx.log(`redis-ha: ${rounds} × kill -9 of a gateway holding ${VICTIM_SESSIONS} sessions nobody else can take`);
      const kills = await killWindows(setup, (r) => startGateway(ctx.procs, { name: `sandgate-ha-victim-${r}`, sandboxes, args: args(`victim-${r}`), readyTimeoutMs: TIMEOUT_MS }, ctx.targetOptions));
      rows.push(windowRow(`false Ready after a gateway's kill -9 (p50), ${n} sessions`, kills, FALSE_READY_BAR_MS, `vs the bar; lease TTL ${DEFAULTS.leaseTtlMs} ms; Ready polled on both survivors every 10 ms`));
      ctx.log(`redis-ha: ${rounds} × SIGSTOP of a process of ${VICTIM_SESSIONS} supervisors`);
      const freezes = await freezeWindows(setup);
      rows.push(windowRow(`a frozen supervisor leaves Ready (p50), ${n} sessions`, freezes, FROZEN_BAR_MS, `vs the bar; heartbeats ${DEFAULTS.heartbeatIntervalMs} ms × ${DEFAULTS.heartbeatMisses} misses`));
      ctx.log(`redis-ha: a third gateway joins two holding ${n} sessions`);
      const moved = await rebalance(setup.survivors, count, () => startGateway(ctx.procs, { name: 'sandgate-ha-join', sandboxes, args: args('join'), publicSupervisorUrl: true, readyTimeoutMs: TIMEOUT_MS }, ctx.targetOptions));
      rows.push(
        row(`rebalancing: a third gateway joins two holding ${n} → each within the margin of its share`, 'ms', moved.convergedMs, undefined, `${moved.counts.join(' / ')} sessions; --rebalance-max-moves ${DEFAULTS.rebalanceMaxMoves} per ${DEFAULTS.rebalanceIntervalMs} ms`),
      );
      rows.push(row('lowest Ready count on any gateway while sessions moved', '', moved.lowestReady, count, `of ${n}: a move never takes a sandbox out of Ready`));
      return {
        baseline: 'see each row',
        rows,
        targets: [
          target(TARGETS[0]!, falseReady === 0, `${falseReady} observations; recovered ${recoveredMs} ms after kill -9 (sentinels switched after ${switchedMs} ms)`),
          perRequestTarget,
          target(TARGETS[2]!, Math.max(...kills) <= FALSE_READY_BAR_MS, `${kills.join(', ')} ms over ${kills.length} kills`),
          target(TARGETS[3]!, Math.max(...freezes) <= FROZEN_BAR_MS, `${freezes.join(', ')} ms over ${freezes.length} freezes`),
          dropsTarget,
          target(TARGETS[5]!, moved.lowestReady >= count, `lowest Ready count ${moved.lowestReady} of ${count}; converged in ${moved.convergedMs} ms to ${moved.counts.join(' / ')}`),
        ],
        notes: [`Redis HA: Sentinel down-after 1 s; lease TTL ${DEFAULTS.leaseTtlMs} ms and heartbeats the defaults; commands/s measured on the master over ${idleMs} ms`],
      };
    } finally {
      admins.clear();
      await redis.stop();
    }
  },
};

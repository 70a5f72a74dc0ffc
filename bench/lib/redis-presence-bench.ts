import { GrpcLoad } from './grpc-load.js';
import { metricValue } from './metrics.js';
import { sleep } from './processes.js';
import { callDelta, startRedis, type BenchRedis } from './redis.js';
import { row, target, type Row, type TargetResult } from './report.js';
import type { BenchContext } from './section.js';
import { readyCount, SESSION_ARGS, Swarm, untilReady } from './session-swarm.js';
import { startGateway, TargetStartError, type Target } from './targets.js';

/**
 * The Redis half of the sessions section. One redis-server of its own; gateways with
 * `--presence redis://…`. It measures:
 *
 * - Redis commands per second with no sessions and with N idle sessions (both windows long enough, in a
 *   full run, to hold a presence re-scan), from `INFO commandstats` deltas;
 * - Redis commands per routed request: the commands during a Check load, less what the idle rate accounts
 *   for, over the requests the gateway decided (the hot path must not touch Redis: target 0);
 * - failover: N sessions owned by gateway A, mirrored by B; A is killed (-9) and the supervisors reconnect
 *   to B; then the same from B to a third gateway C by SIGTERM. Time until B's (C's) view shows every
 *   sandbox Ready again on sessions it holds, and how many were not Ready at the worst moment.
 */

export interface RedisBenchOptions {
  readonly count: number;
  readonly sandboxes: string;
  readonly secretFile: string;
  readonly idleMs: number;
}

export interface RedisBenchOutput {
  readonly rows: Row[];
  readonly targets: TargetResult[];
  readonly notes: string[];
  readonly data: Record<string, unknown>;
}

const TARGET_NAME = '0 Redis commands per routed request';
/** Below one command per thousand requests, any per-request command would show as ≥ 1. */
const NOISE_PER_REQUEST = 0.001;
const LEASE_TTL_MS = 10_000;
const TIMEOUT_MS = 60_000;
const LOAD_MS = 3_000;

async function commandRate(redis: BenchRedis, ms: number): Promise<{ perSecond: number; byCommand: Record<string, number> }> {
  const before = await redis.commandCalls();
  await sleep(ms);
  const byCommand = callDelta(before, await redis.commandCalls());
  return { perSecond: (Object.values(byCommand).reduce((a, b) => a + b, 0) * 1000) / ms, byCommand };
}

function gateway(ctx: BenchContext, o: RedisBenchOptions, redis: BenchRedis, id: string): Promise<Target> {
  return startGateway(
    ctx.procs,
    { name: `sandgate-redis-${id}`, sandboxes: o.sandboxes, supervisorSecretFile: o.secretFile, presence: redis.url, gatewayId: id, args: [...SESSION_ARGS, '--lease-ttl-ms', String(LEASE_TTL_MS)] },
    ctx.targetOptions,
  );
}

function skipped(reason: string): RedisBenchOutput {
  return { rows: [], targets: [target(TARGET_NAME, undefined, `skipped: ${reason}`)], notes: [`Redis presence: skipped: ${reason}`], data: { skipped: reason } };
}

export async function redisPresenceBench(ctx: BenchContext, o: RedisBenchOptions): Promise<RedisBenchOutput> {
  let redis: BenchRedis;
  try {
    redis = await startRedis(ctx.procs);
  } catch (err) {
    return skipped((err as Error).message.split('\n')[0]!);
  }
  try {
    let a: Target;
    try {
      a = await gateway(ctx, o, redis, 'bench-a');
    } catch (err) {
      if (err instanceof TargetStartError) return skipped(err.reason);
      throw err;
    }
    const rows: Row[] = [];
    const notes: string[] = [];
    const n = o.count.toLocaleString('en-US');

    ctx.log(`redis presence: idle, no sessions (${o.idleMs} ms)`);
    const idleEmpty = await commandRate(redis, o.idleMs);
    const swarm = await Swarm.start(ctx.procs, [a.supervisorUrl], o.secretFile, 'swarm-redis');
    const { done } = await swarm.open(0, o.count, TIMEOUT_MS);
    if (done.timedOut) throw new Error(`only ${done.accepted} of ${o.count} sessions were accepted by ${a.name} (${done.firstError ?? 'no error seen'})`);
    await untilReady(a.adminUrl, (r) => r === o.count, TIMEOUT_MS);
    ctx.log(`redis presence: idle, ${n} sessions (${o.idleMs} ms)`);
    const idleFull = await commandRate(redis, o.idleMs);
    rows.push(row(`Redis commands/s, ${n} idle sessions`, '/s', idleFull.perSecond, idleEmpty.perSecond, 'vs no sessions'));

    ctx.log(`redis presence: Check load over ${n} sandboxes`);
    const load = await GrpcLoad.start(ctx.procs, 1);
    const decisions0 = await metricValue(a.adminUrl, 'sandgate_edge_decisions_total', { door: 'ext_authz' });
    const calls0 = await redis.commandCalls();
    const t0 = performance.now();
    const result = await load.run({ target: a.grpcTarget, kind: 'check', inFlight: 64, warmupMs: 0, durationMs: LOAD_MS, sandboxes: o.count });
    const elapsed = performance.now() - t0;
    const during = callDelta(calls0, await redis.commandCalls());
    const decisions = (await metricValue(a.adminUrl, 'sandgate_edge_decisions_total', { door: 'ext_authz' })) - decisions0;
    const duringTotal = Object.values(during).reduce((x, y) => x + y, 0);
    const perRequest = Math.max(0, duringTotal - (idleFull.perSecond * elapsed) / 1000) / Math.max(1, decisions);
    rows.push(row('Redis commands/s during Check load', '/s', (duringTotal * 1000) / elapsed, idleFull.perSecond, 'vs idle'));
    rows.push(row('Redis commands per routed request', '', perRequest, undefined, `${decisions.toLocaleString('en-US')} requests, ${duringTotal} commands`));
    if (result.notAllowed > 0 || result.errors > 0) notes.push(`Check load on ${a.name}: ${result.errors} errors, ${result.notAllowed} sampled answers not an allow`);
    const targets = [target(TARGET_NAME, perRequest < NOISE_PER_REQUEST, `${perRequest.toFixed(4)} per request (${duringTotal} commands in ${Math.round(elapsed)} ms, idle rate ${idleFull.perSecond.toFixed(1)}/s, ${decisions} requests)`)];

    const failover = await failoverBench(ctx, o, redis, a, swarm);
    rows.push(row(`failover after kill -9 of the owner, ${n} sessions`, 'ms', failover.kill.ms, LEASE_TTL_MS, 'vs the lease TTL'));
    rows.push(row(`failover after SIGTERM of the owner, ${n} sessions`, 'ms', failover.term.ms, LEASE_TTL_MS, 'vs the lease TTL'));
    rows.push(row(`sandboxes not Ready at the worst moment, kill -9`, '', failover.kill.notReadyAtWorst, o.count, `of ${n}`));
    rows.push(row(`sandboxes not Ready at the worst moment, SIGTERM`, '', failover.term.notReadyAtWorst, o.count, `of ${n}`));
    notes.push(
      `failover: from the signal until every supervisor is accepted by the surviving gateway and its view has all ${n} sandboxes Ready ` +
        `(last accepted after ${Math.round(failover.kill.acceptedMs)} ms after kill -9, ${Math.round(failover.term.acceptedMs)} ms after SIGTERM); supervisors reconnect as the reference supervisor does`,
    );
    await swarm.stop();
    return {
      rows,
      targets,
      notes,
      data: { idleEmpty, idleFull, load: { decisions, commands: during, perRequest, rps: Math.round(result.rps) }, failover },
    };
  } finally {
    redis.close();
  }
}

interface Failover {
  /** From the signal until every session is accepted again and the survivor's view has them all Ready. */
  readonly ms: number;
  /** From the signal until the last session was accepted by the survivor. */
  readonly acceptedMs: number;
  /** The most sandboxes the survivor's view had not Ready at once during the move (polled every 25 ms). */
  readonly notReadyAtWorst: number;
}

/**
 * Moves the swarm's `count` sessions (the whole view) from `from` to `to` by `how`. "Ready" is read from
 * `to`'s /metrics (cheap enough to poll while it takes the storm); that the sessions are `to`'s own is what
 * their `accepted` after the signal says.
 */
async function moveSessions(swarm: Swarm, from: Target, to: Target, count: number, how: 'kill' | 'term'): Promise<Failover> {
  await untilReady(to.adminUrl, (r) => r === count, TIMEOUT_MS);
  const t0 = Date.now();
  let minReady = count;
  let polling = true;
  const poller = (async () => {
    while (polling) {
      minReady = Math.min(minReady, await readyCount(to.adminUrl));
      await sleep(25);
    }
  })();
  from.child.proc.kill(how === 'kill' ? 'SIGKILL' : 'SIGTERM');
  try {
    const accepted = await swarm.waitAccepted(count, t0, TIMEOUT_MS);
    if (accepted.timedOut) throw new Error(`after ${how === 'kill' ? 'kill -9' : 'SIGTERM'} of ${from.name}: only ${accepted.accepted} of ${count} sessions were accepted by ${to.name}`);
    const readyAt = await untilReady(to.adminUrl, (r) => r === count, TIMEOUT_MS);
    return { ms: Math.max(readyAt, accepted.lastAcceptedAt) - t0, acceptedMs: accepted.lastAcceptedAt - t0, notReadyAtWorst: count - minReady };
  } finally {
    polling = false;
    await poller;
    await from.child.exited;
  }
}

async function failoverBench(ctx: BenchContext, o: RedisBenchOptions, redis: BenchRedis, a: Target, swarm: Swarm): Promise<{ kill: Failover; term: Failover }> {
  const b = await gateway(ctx, o, redis, 'bench-b');
  await swarm.setGateways([a.supervisorUrl, b.supervisorUrl]);
  ctx.log('redis presence: failover, kill -9 of the owner');
  const kill = await moveSessions(swarm, a, b, o.count, 'kill');
  const c = await gateway(ctx, o, redis, 'bench-c');
  await swarm.setGateways([b.supervisorUrl, c.supervisorUrl]);
  ctx.log('redis presence: failover, SIGTERM of the owner');
  const term = await moveSessions(swarm, b, c, o.count, 'term');
  return { kill, term };
}

import { callDelta, startBenchSentinel, type BenchSentinel } from './lib/bench-sentinel.js';
import { GrpcLoad } from './lib/grpc-load.js';
import { metricValue } from './lib/metrics.js';
import { sleep } from './lib/processes.js';
import { row, target, type Row } from './lib/report.js';
import { writeSandboxesFile } from './lib/sandboxes.js';
import { type BenchContext, type Section } from './lib/section.js';
import { readyCount, sessionArgs, Swarm, untilReady, writeSecret } from './lib/session-swarm.js';
import { startGateway, TargetStartError, type Target } from './lib/targets.js';

/**
 * 8. Redis HA: presence on a Sentinel-managed Redis (master, replica, three sentinels), N supervisor
 * sessions (10k; 1k in --quick) spread over three gateways.
 *
 * - Redis commands per second at N idle sessions across 3 gateways (INFO commandstats on the master);
 * - Redis commands per routed request: the commands during a Check load on one gateway, less what the
 *   idle rate accounts for, over the requests it decided (the hot path must not touch Redis: target 0);
 * - failover time: from kill -9 of the master until every gateway's /readyz is `ready` again and the new
 *   master holds all N presence records (every session re-asserted), with the sentinels' detection
 *   (down-after 1 s) shown apart;
 * - false-Ready observations during it: a few sessions are closed before the kill, and each gateway's
 *   Ready count is polled every 25 ms; a count above the live sessions is a sandbox Ready with no session
 *   (target 0). The lowest count seen is reported too (a gateway serving from its mirror stays at N);
 * - then a gateway's failover: kill -9 of one gateway, until its sessions are accepted by another and all
 *   N are Ready there.
 */

const GATEWAYS = 3;
const LEASE_TTL_MS = 10_000;
const TIMEOUT_MS = 120_000;
const PRESENCE_KEY = '{sandgate}:presence';
const LOAD_MS = 3_000;
/** Below one command per thousand requests, any per-request command would show as ≥ 1. */
const NOISE_PER_REQUEST = 0.001;
const TARGETS = ['0 false-Ready observations during a Sentinel failover', '0 Redis commands per routed request'];

async function commandRate(redis: BenchSentinel, port: number, ms: number): Promise<{ perSecond: number; byCommand: Record<string, number> }> {
  const before = await redis.commandCalls(port);
  await sleep(ms);
  const byCommand = callDelta(before, await redis.commandCalls(port));
  return { perSecond: (Object.values(byCommand).reduce((a, b) => a + b, 0) * 1000) / ms, byCommand };
}

function skipped(reason: string) {
  return { baseline: '-', rows: [], targets: TARGETS.map((t) => target(t, undefined, `skipped: ${reason}`)), notes: [], data: { skipped: reason } };
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

export const redisHa: Section = {
  id: 'redis-ha',
  title: '8. Redis HA (presence on Sentinel: failover, false Ready, commands/s and per request, 3 gateways)',
  estimateSeconds: { quick: 50, full: 90 },
  async run(ctx: BenchContext) {
    const count = ctx.quick ? 1_000 : 10_000;
    const gone = Math.max(10, count / 100);
    const idleMs = ctx.quick ? 4_000 : 15_000;
    const secretFile = writeSecret(ctx.tmp);
    const sandboxes = writeSandboxesFile(ctx.tmp, count + gone, 'required');
    let redis: BenchSentinel;
    try {
      redis = await startBenchSentinel(ctx.procs);
    } catch (err) {
      return skipped((err as Error).message.split('\n')[0]!);
    }
    try {
      const gateways: Target[] = [];
      for (let i = 0; i < GATEWAYS; i++) {
        try {
          gateways.push(
            await startGateway(
              ctx.procs,
              {
                name: `sandgate-ha-${i}`,
                sandboxes,
                args: [...sessionArgs(secretFile), '--presence', 'redis://127.0.0.1', '--gateway-id', `ha-${i}`, '--lease-ttl-ms', String(LEASE_TTL_MS), '--presence-redis-options', JSON.stringify(redis.options)],
              },
              ctx.targetOptions,
            ),
          );
        } catch (err) {
          if (err instanceof TargetStartError) return skipped(err.reason);
          throw err;
        }
      }
      const n = count.toLocaleString('en-US');
      const rows: Row[] = [];
      const master = await redis.masterPort();
      ctx.log(`redis-ha: idle, no sessions (${idleMs} ms)`);
      const idleEmpty = await commandRate(redis, master, idleMs);

      // A third of the sessions on each gateway, then `gone` more that leave again before the failover.
      const per = Math.ceil(count / GATEWAYS);
      const swarms: Swarm[] = [];
      for (const [i, g] of gateways.entries()) {
        const s = await Swarm.start(ctx.procs, [g.supervisorUrl], secretFile, `swarm-ha-${i}`);
        swarms.push(s);
        const from = i * per;
        const { done } = await s.open(from, Math.min(per, count - from), TIMEOUT_MS);
        if (done.timedOut) throw new Error(`${g.name}: only ${done.accepted} sessions accepted (${done.firstError ?? 'no error seen'})`);
      }
      for (const g of gateways) await untilReady(g.adminUrl, (r) => r === count, TIMEOUT_MS);
      ctx.log(`redis-ha: idle, ${n} sessions on ${GATEWAYS} gateways (${idleMs} ms)`);
      const idleFull = await commandRate(redis, master, idleMs);
      rows.push(row(`Redis commands/s, ${n} idle sessions on ${GATEWAYS} gateways`, '/s', idleFull.perSecond, idleEmpty.perSecond, 'vs no sessions'));

      ctx.log(`redis-ha: Check load on one gateway over ${n} sandboxes`);
      const load = await GrpcLoad.start(ctx.procs, 1);
      const decided = () => metricValue(gateways[0]!.adminUrl, 'sandgate_edge_decisions_total', { door: 'ext_authz' });
      const [decisions0, calls0, t0load] = [await decided(), await redis.commandCalls(master), performance.now()];
      const checks = await load.run({ target: gateways[0]!.grpcTarget, kind: 'check', inFlight: 64, warmupMs: 0, durationMs: LOAD_MS, sandboxes: count });
      const elapsed = performance.now() - t0load;
      const during = Object.values(callDelta(calls0, await redis.commandCalls(master))).reduce((x, y) => x + y, 0);
      const decisions = (await decided()) - decisions0;
      const perRequest = Math.max(0, during - (idleFull.perSecond * elapsed) / 1000) / Math.max(1, decisions);
      await load.stop();
      rows.push(row('Redis commands per routed request', '', perRequest, undefined, `${decisions} Checks at ${Math.round(checks.rps)} req/s, ${during} commands in ${Math.round(elapsed)} ms`));
      const perRequestTarget = target(TARGETS[1]!, perRequest < NOISE_PER_REQUEST && checks.errors === 0, `${perRequest.toFixed(4)} per request (${decisions} requests, ${checks.errors} errors, idle rate ${idleFull.perSecond.toFixed(1)}/s)`);

      const leaving = await Swarm.start(ctx.procs, [gateways[0]!.supervisorUrl], secretFile, 'swarm-ha-gone');
      await leaving.open(count, gone, TIMEOUT_MS);
      for (const g of gateways) await untilReady(g.adminUrl, (r) => r === count + gone, TIMEOUT_MS);
      await leaving.close();
      for (const g of gateways) await untilReady(g.adminUrl, (r) => r === count, TIMEOUT_MS);

      ctx.log('redis-ha: kill -9 of the master');
      let falseReady = 0;
      let lowest = count;
      let polling = true;
      const poller = (async () => {
        while (polling) {
          for (const g of gateways) {
            const r = await readyCount(g.adminUrl).catch(() => count);
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
        await redis.kill(master);
        const promoted = await redis.switched(master, TIMEOUT_MS);
        switchedMs = Date.now() - t0;
        const deadline = Date.now() + TIMEOUT_MS;
        for (;;) {
          const states = await Promise.all(gateways.map(readyz));
          const records = await redis.hlen(promoted, PRESENCE_KEY).catch(() => -1);
          if (states.every((s) => s === 'ready') && records === count) break;
          if (Date.now() > deadline) throw new Error(`not recovered within ${TIMEOUT_MS} ms: /readyz ${states.join(', ')}, ${records} records on the new master`);
          await sleep(25);
        }
        recoveredMs = Date.now() - t0;
      } finally {
        polling = false;
        await poller;
      }

      // A gateway's sessions reconnect to another after its kill -9, as the reference supervisor's do.
      ctx.log(`redis-ha: kill -9 of a gateway holding ${per} sessions`);
      await swarms[0]!.setGateways([gateways[0]!.supervisorUrl, gateways[1]!.supervisorUrl]);
      const tg = Date.now();
      gateways[0]!.child.proc.kill('SIGKILL');
      const moved = await swarms[0]!.waitAccepted(per, tg, TIMEOUT_MS);
      if (moved.timedOut) throw new Error(`after kill -9 of ${gateways[0]!.name}: only ${moved.accepted} of ${per} sessions were accepted by ${gateways[1]!.name}`);
      const movedMs = Math.max(moved.lastAcceptedAt, await untilReady(gateways[1]!.adminUrl, (r) => r === count, TIMEOUT_MS)) - tg;
      for (const s of swarms) await s.stop();
      await leaving.stop();

      rows.push(row(`failover (kill -9 master) → all ${n} sessions re-asserted, /readyz ready`, 'ms', recoveredMs, switchedMs, 'vs the sentinels switching'));
      rows.push(row('false-Ready observations during the failover', '', falseReady, undefined, `${gone} sessions closed just before; Ready polled on ${GATEWAYS} gateways every 25 ms`));
      rows.push(row('lowest Ready count seen during the failover', '', lowest, count, `of ${n}: gateways route from their mirror`));
      rows.push(row(`gateway failover (kill -9 of a gateway) → its ${per} sessions accepted by another, all Ready`, 'ms', movedMs, LEASE_TTL_MS, 'vs the lease TTL'));
      return {
        baseline: 'see each row',
        rows,
        targets: [target(TARGETS[0]!, falseReady === 0, `${falseReady} observations; recovered ${recoveredMs} ms after kill -9 (sentinels switched after ${switchedMs} ms)`), perRequestTarget],
        notes: [
          `Redis HA: Sentinel down-after 1 s; lease TTL ${LEASE_TTL_MS} ms; commands/s measured on the master over ${idleMs} ms (idle rate by command: ${JSON.stringify(idleFull.byCommand)})`,
        ],
        data: { count, gateways: GATEWAYS, idleEmpty, idleFull, perRequest: { decisions, during, perRequest }, failover: { switchedMs, recoveredMs, falseReady, lowest, gatewayKillMs: movedMs } },
      };
    } finally {
      redis.close();
    }
  },
};

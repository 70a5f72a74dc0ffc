import { startBenchSentinel, type BenchSentinel } from './lib/bench-sentinel.js';
import { sleep } from './lib/processes.js';
import { callDelta } from './lib/redis.js';
import { row, target, type Row } from './lib/report.js';
import { writeSandboxesFile } from './lib/sandboxes.js';
import { type BenchContext, type Section } from './lib/section.js';
import { readyCount, SESSION_ARGS, Swarm, untilReady, writeSecret } from './lib/session-swarm.js';
import { startGateway, TargetStartError, type Target } from './lib/targets.js';

/**
 * 8. Redis HA: presence on a Sentinel-managed Redis (master, replica, three sentinels), N supervisor
 * sessions (10k; 1k in --quick) spread over three gateways.
 *
 * - Redis commands per second at N idle sessions across 3 gateways (INFO commandstats on the master);
 * - failover time: from kill -9 of the master until every gateway's /readyz is `ready` again and the new
 *   master holds all N presence records (every session re-asserted), with the sentinels' detection
 *   (down-after 1 s) shown apart;
 * - false-Ready observations during it: a few sessions are closed before the kill, and each gateway's
 *   Ready count is polled every 25 ms; a count above the live sessions is a sandbox Ready with no session
 *   (target 0). The lowest count seen is reported too (a gateway serving from its mirror stays at N).
 */

const GATEWAYS = 3;
const LEASE_TTL_MS = 10_000;
const TIMEOUT_MS = 120_000;
const PRESENCE_KEY = '{sandgate}:presence';

async function commandRate(redis: BenchSentinel, port: number, ms: number): Promise<{ perSecond: number; byCommand: Record<string, number> }> {
  const before = await redis.commandCalls(port);
  await sleep(ms);
  const byCommand = callDelta(before, await redis.commandCalls(port));
  return { perSecond: (Object.values(byCommand).reduce((a, b) => a + b, 0) * 1000) / ms, byCommand };
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
  title: '8. Redis HA (presence on Sentinel: failover, false Ready, commands/s across 3 gateways)',
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
      const reason = `skipped: ${(err as Error).message.split('\n')[0]}`;
      return { baseline: '-', rows: [], targets: [target('0 false-Ready observations during a Sentinel failover', undefined, reason)], notes: [`Redis HA: ${reason}`], data: { skipped: reason } };
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
                supervisorSecretFile: secretFile,
                presence: 'redis://127.0.0.1',
                gatewayId: `ha-${i}`,
                // The operator surface (/metrics, /readyz) stays on the admin port the harness polls.
                args: [...SESSION_ARGS, '--lease-ttl-ms', String(LEASE_TTL_MS), '--presence-redis-options', JSON.stringify(redis.options)],
              },
              ctx.targetOptions,
            ),
          );
        } catch (err) {
          if (err instanceof TargetStartError) return { baseline: '-', rows: [], targets: [target('0 false-Ready observations during a Sentinel failover', undefined, `skipped: ${err.reason}`)], notes: [], data: { skipped: err.reason } };
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
      for (const s of swarms) await s.stop();
      await leaving.stop();

      rows.push(row(`failover (kill -9 master) → all ${n} sessions re-asserted, /readyz ready`, 'ms', recoveredMs, switchedMs, 'vs the sentinels switching'));
      rows.push(row('false-Ready observations during the failover', '', falseReady, undefined, `${gone} sessions closed just before; Ready polled on ${GATEWAYS} gateways every 25 ms`));
      rows.push(row('lowest Ready count seen during the failover', '', lowest, count, `of ${n}: gateways route from their mirror`));
      return {
        baseline: 'see each row',
        rows,
        targets: [target('0 false-Ready observations during a Sentinel failover', falseReady === 0, `${falseReady} observations; recovered ${recoveredMs} ms after kill -9 (sentinels switched after ${switchedMs} ms)`)],
        notes: [
          `Redis HA: Sentinel down-after 1 s; lease TTL ${LEASE_TTL_MS} ms; commands/s measured on the master over ${idleMs} ms (idle rate by command: ${JSON.stringify(idleFull.byCommand)})`,
        ],
        data: { count, gateways: GATEWAYS, idleEmpty, idleFull, failover: { switchedMs, recoveredMs, falseReady, lowest } },
      };
    } finally {
      redis.close();
    }
  },
};

import type { Measured } from './lib/alternation.js';
import { compareGrpc, compareRate, formatRatio, judgedFigure, round2, spread, trialProblems, trialsData, type Spread, type Trials } from './lib/compare.js';
import { GrpcLoad } from './lib/grpc-load.js';
import { metricValue } from './lib/metrics.js';
import { row, target, type Row, type TargetResult } from './lib/report.js';
import { blocks, type Section } from './lib/section.js';
import { startBare, startGateway, type Target } from './lib/targets.js';

/**
 * 5. Churn: what 1k and 10k snapshot updates per second cost a gateway serving Checks. Two gateways of
 * 10k sandboxes, each fed by a remote driver in its own process (bench-driver.ts) over the production
 * WatchSandboxes stream, so the cost measured is the gateway's whole path: decode, validate, apply to the
 * view, recompose, notify. One driver churns while the two gateways are compared at a fixed offered Check
 * rate; halfway the roles swap, so each gateway's own offset falls on both sides.
 *
 * A gateway answers Checks on one thread, so at its Check limit every core-second the updates take is a
 * second of Checks it does not answer: the target, 0.1 extra cores at 10k updates/s, is 10 % of its Check
 * throughput. Check req/s at the limit, churning ÷ quiet, is printed beside; the driver's own CPU apart.
 */

const SANDBOXES = 10_000;
const RATES = [1_000, 10_000] as const;
const JUDGED_RATE = 10_000;
const MAX_SHARE = 0.1;
const IN_FLIGHT = 64;
/** Checks per second offered: the Check door's own rate (envoy-grpc.ts), which both sides sustain. */
const CHECK_RATE = 3000;
const APPLIED = { driver: 'grpc/bench', result: 'applied' };

interface Fed {
  readonly gw: Target;
  readonly driver: Target;
}

function coresText(s: Spread): string {
  const signed = (v: number): string => (v >= 0 ? '+' : '') + v.toFixed(3);
  return `${signed(s.median)} cores (spread ${signed(s.min)} … ${signed(s.max)}, ${s.values.length} pairs)`;
}

export const churn: Section = {
  id: 'churn',
  title: '5. Churn (10k sandboxes, snapshot updates during Check load)',
  async run(ctx) {
    const plan = blocks(ctx);
    const fed: Fed[] = [];
    for (const name of ['a', 'b']) {
      const driver = await startBare(ctx.procs, `bench-driver-${name}`, 'lib/bench-driver.js');
      await driver.child.request('setup', { count: SANDBOXES });
      const gw = await startGateway(ctx.procs, { name: `sandgate-churn-${name}`, drivers: [`grpc://127.0.0.1:${driver.port('main')}?name=bench`] }, ctx.targetOptions);
      fed.push({ gw, driver });
    }
    const load = await GrpcLoad.start(ctx.procs, 1);
    const rows: Row[] = [];
    const notes: string[] = [];
    const targets: TargetResult[] = [];
    const data: Record<string, unknown> = {};

    /** The churning gateway (a) against the quiet one (b), each in turn, at `rate` Checks/s (undefined: at the limit). */
    const churning = async (updates: number, batch: boolean, rate: number | undefined) => {
      const out = { a: [] as Measured[], b: [] as Measured[], sent: 0, applied: 0, seconds: 0, driverUs: 0 };
      for (const [hot, quiet] of [[fed[0]!, fed[1]!], [fed[1]!, fed[0]!]] as const) {
        const before = await metricValue(hot.gw.adminUrl, 'sandgate_drivers_events_total', APPLIED);
        const cpu0 = hot.driver.cpuMicrosNow();
        await hot.driver.child.request('churn', { rate: updates, batch });
        const r: Trials = await compareGrpc({ ...plan, rate, inFlight: IN_FLIGHT, blocks: plan.blocks / 2 }, load, 'check', [{ target: hot.gw, sandboxes: SANDBOXES }], [{ target: quiet.gw, sandboxes: SANDBOXES }]);
        const s = await hot.driver.child.request<{ sent: number; seconds: number }>('stop');
        out.driverUs += hot.driver.cpuMicrosNow() - cpu0;
        // Let the gateway finish what is in flight on the stream before counting.
        await new Promise((res) => setTimeout(res, 200));
        out.applied += (await metricValue(hot.gw.adminUrl, 'sandgate_drivers_events_total', APPLIED)) - before;
        out.sent += s.sent;
        out.seconds += s.seconds;
        out.a.push(...r.a);
        out.b.push(...r.b);
      }
      // Each side's CPU over the whole block, in cores: the churn runs through both halves of a block.
      const extra = spread(out.a.map((m, k) => ((m.targetCpuCores - out.b[k]!.targetCpuCores) * m.durationMs) / plan.blockMs));
      return { ...out, extra, appliedPerSecond: out.applied / out.seconds, driverCores: out.driverUs / 1e6 / out.seconds };
    };

    for (const updates of RATES) {
      const label = `${updates.toLocaleString('en-US')} updates/s`;
      ctx.log(`churn: ${label}, gateway CPU at ${CHECK_RATE} Checks/s, ${plan.blocks} pairs`);
      const c = await churning(updates, true, CHECK_RATE);
      const perUpdateUs = (c.extra.median * 1e6) / Math.max(1, c.appliedPerSecond);
      const cores = (ms: readonly Measured[]) => spread(ms.map((m) => (m.targetCpuCores * m.durationMs) / plan.blockMs)).median;
      rows.push(row(`gateway CPU @ ${label}, ${CHECK_RATE.toLocaleString('en-US')} Checks/s offered`, 'cores', cores(c.a), cores(c.b), 'vs no updates'));
      rows.push(row(`gateway CPU per update @ ${label}`, 'µs', perUpdateUs, undefined));
      rows.push(row(`updates applied/s @ ${label}`, '/s', c.appliedPerSecond, c.sent / c.seconds, 'vs sent by the driver'));
      notes.push(`${label}: the gateway's extra CPU ${coresText(c.extra)}; the driver process's own CPU ${round2(c.driverCores)} cores (not counted as the gateway's)`);
      notes.push(...trialProblems({ a: `churning @ ${label}`, b: `quiet @ ${label}` }, c));
      data[`rate-${updates}`] = { ...trialsData(c), extraCores: round2(c.extra.median), appliedPerSecond: Math.round(c.appliedPerSecond), perUpdateUs: round2(perUpdateUs) };
      if (updates !== JUDGED_RATE) continue;

      ctx.log(`churn: ${label}, one message per update`);
      const single = await churning(updates, false, CHECK_RATE);
      rows.push(row(`gateway CPU per update @ ${label}, one message per update`, 'µs', (single.extra.median * 1e6) / Math.max(1, single.appliedPerSecond), perUpdateUs, 'vs batched per tick'));
      notes.push(`${label}, one gRPC message per update instead of one batch per driver tick: the gateway's extra CPU ${coresText(single.extra)}`);
      ctx.log(`churn: ${label}, Check req/s at the limit`);
      const limit = compareRate(await churning(updates, true, undefined));
      rows.push(row(`Check req/s at the limit @ ${label}`, 'req/s', spread(limit.a.map((m) => m.rps)).median, spread(limit.b.map((m) => m.rps)).median, 'vs no updates'));
      targets.push(
        target(
          `${JUDGED_RATE / 1000}k changes/s cost ≤ ${Math.round(MAX_SHARE * 100)} % of Check throughput (the gateway's extra CPU ≤ ${MAX_SHARE} of its one core)`,
          c.extra.median <= MAX_SHARE,
          `${coresText(c.extra)}, ${perUpdateUs.toFixed(1)} µs per update at ${Math.round(c.appliedPerSecond)} applied/s; Check req/s at the limit ${formatRatio(limit.ratio)} of no updates; the driver's own CPU ${round2(c.driverCores)} cores`,
          judgedFigure(c.extra, 'cores'),
        ),
      );
    }
    return { baseline: 'a gateway with no updates', rows, targets, notes, data };
  },
};

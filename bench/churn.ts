import { alternate, compareRate, formatRatio, judgedFigure, PAIRS, spread, type Spread } from './lib/cost.js';
import { GrpcLoad } from './lib/grpc-load.js';
import { warmUp } from './lib/interleave.js';
import { measured, round2, runData, runProblems, type Measured } from './lib/measure.js';
import { metricValue } from './lib/metrics.js';
import { row, target, type Row, type TargetResult } from './lib/report.js';
import { timing, type Section, type Timing } from './lib/section.js';
import { startBare, startGateway } from './lib/targets.js';

/**
 * 5. Churn: what 1k and 10k snapshot updates per second cost a gateway serving Checks, against the same
 * gateway with no updates. The updates come from a remote driver in its own process (bench-driver.ts)
 * over the production WatchSandboxes stream, so the cost measured is the gateway's whole path: decode,
 * validate, apply to the view, recompose, notify.
 *
 * Judged on cost (cost.ts): at a fixed offered Check rate, churning and quiet trials alternate, and the
 * gateway's extra CPU is what the updates cost it. A gateway answers Checks on one thread, so at its
 * Check limit every core-second the updates take is a second of Checks it does not answer: 0.1 cores is
 * 10 % of its Check throughput. req/s at the limit, churning ÷ quiet, is printed beside; the driver's own
 * CPU is reported apart from the gateway's.
 */

const SANDBOXES = 10_000;
const RATES = [1_000, 10_000] as const;
const JUDGED_RATE = 10_000;
const MAX_SHARE = 0.1;
const IN_FLIGHT = 64;
/**
 * Checks per second offered in the cost trials: the Check door's own rate (envoy-grpc.ts), which both arms
 * sustain (at the limit a churning gateway answers about 4,400/s here). At 2,000/s the quiet arm's CPU
 * moved by a third from one run to the next (0.33 … 0.49 cores, while the churning arm's stayed within
 * 0.43 … 0.54), and the difference — the verdict — read +0.029 … +0.135 cores across eight runs of one code;
 * at 3,000/s, +0.047 and +0.063 in two runs of this section alone and +0.103 in a whole --quick run.
 */
const CHECK_RATE = 3000;
/** Pairs of the judged comparison (10k updates/s): its quiet arm moves most, so it gets more than PAIRS. */
const JUDGED_PAIRS = 8;
const APPLIED = { driver: 'grpc/bench', result: 'applied' };

function signed(v: number): string {
  return (v >= 0 ? '+' : '') + v.toFixed(3);
}

function coresText(s: Spread): string {
  return `${signed(s.median)} cores (spread ${signed(s.min)} … ${signed(s.max)}, ${s.values.length} pairs)`;
}

export const churn: Section = {
  id: 'churn',
  title: '5. Churn (10k sandboxes, snapshot updates during Check load)',
  async run(ctx) {
    const t = timing(ctx, { warmupMs: 400, durationMs: 1600 }, { warmupMs: 1000, durationMs: 6000 });
    const tCost = timing(ctx, { warmupMs: 400, durationMs: 2000 }, { warmupMs: 1000, durationMs: 5000 });
    const pairs = PAIRS;
    const driver = await startBare(ctx.procs, 'bench-driver', 'lib/bench-driver.js');
    await driver.child.request('setup', { count: SANDBOXES });
    const gw = await startGateway(ctx.procs, { name: 'sandgate-churn', drivers: [`grpc://127.0.0.1:${driver.port('main')}?name=bench`] }, ctx.targetOptions);
    const load = await GrpcLoad.start(ctx.procs, ctx.loadProcesses, ctx.grpcClient);
    const check = (rate?: number) => (w: Timing): Promise<Measured> =>
      measured(gw, w, () => load.run({ target: gw.grpcTarget, kind: 'check', inFlight: IN_FLIGHT, ...w, sandboxes: SANDBOXES, rate }));

    const rows: Row[] = [];
    const notes: string[] = [];
    const targets: TargetResult[] = [];
    const data: Record<string, unknown> = {};
    await warmUp({ check: check() }, ctx.quick ? 1000 : 3000);
    for (const updates of RATES) {
      const label = `${updates.toLocaleString('en-US')} updates/s`;
      let sent = 0;
      let applied = 0;
      let seconds = 0;
      let driverCpuUs = 0;
      /** A window of Checks while the driver churns (one batch per tick, or one message per update). */
      const churning = (rate?: number, batch = true) => async (w: Timing): Promise<Measured> => {
        const before = await metricValue(gw.adminUrl, 'sandgate_drivers_events_total', APPLIED);
        const cpu0 = await driver.cpuMicros();
        await driver.child.request('churn', { rate: updates, batch });
        const m = await check(rate)(w);
        const s = await driver.child.request<{ sent: number; seconds: number }>('stop');
        driverCpuUs += (await driver.cpuMicros()) - cpu0;
        // Let the gateway finish what is in flight on the stream before counting.
        await new Promise((r) => setTimeout(r, 200));
        applied += (await metricValue(gw.adminUrl, 'sandgate_drivers_events_total', APPLIED)) - before;
        sent += s.sent;
        seconds += s.seconds;
        return m;
      };
      const costPairs = updates === JUDGED_RATE ? JUDGED_PAIRS : pairs;
      ctx.log(`churn: ${label}, gateway CPU at ${CHECK_RATE} Checks/s, ${costPairs} pairs`);
      const cost = await alternate(costPairs, tCost, churning(CHECK_RATE), check(CHECK_RATE));
      const extra = spread(cost.a.map((m, k) => m.targetCpuCores - cost.b[k]!.targetCpuCores));
      const appliedPerSecond = applied / seconds;
      const perUpdateUs = (extra.median * 1e6) / Math.max(1, appliedPerSecond);
      const quietCores = spread(cost.b.map((m) => m.targetCpuCores)).median;
      rows.push(row(`gateway CPU @ ${label}, ${CHECK_RATE.toLocaleString('en-US')} Checks/s offered`, 'cores', spread(cost.a.map((m) => m.targetCpuCores)).median, quietCores, 'vs no updates'));
      rows.push(row(`gateway CPU per update @ ${label}`, 'µs', perUpdateUs, undefined));
      rows.push(row(`updates applied/s @ ${label}`, '/s', appliedPerSecond, sent / seconds, 'vs sent by the driver'));
      notes.push(`${label}: the gateway's extra CPU ${coresText(extra)}; the driver process's own CPU ${round2(driverCpuUs / 1e6 / seconds)} cores (not counted as the gateway's)`);
      for (const [k, m] of [...cost.a, ...cost.b].entries()) {
        notes.push(...runProblems(`Check @ ${label}, trial ${k + 1}`, m));
        if (m.rps < CHECK_RATE * 0.95) notes.push(`Check @ ${label}, trial ${k + 1}: ${Math.round(m.rps)} of ${CHECK_RATE} Checks/s offered`);
      }
      const record: Record<string, unknown> = {
        checkRate: CHECK_RATE,
        extraCores: { median: round2(extra.median), min: round2(extra.min), max: round2(extra.max) },
        churn: cost.a.map(runData),
        none: cost.b.map(runData),
        sentPerSecond: Math.round(sent / seconds),
        appliedPerSecond: Math.round(appliedPerSecond),
        gatewayCpuPerUpdateUs: round2(perUpdateUs),
        driverCores: round2(driverCpuUs / 1e6 / seconds),
      };
      if (updates === JUDGED_RATE) {
        // The same updates, one gRPC message each (a driver that does not batch): what batching saves.
        // (The counts these trials add come after the figures above were taken.)
        ctx.log(`churn: ${label}, one message per update, gateway CPU at ${CHECK_RATE} Checks/s, ${pairs} pairs`);
        const single = await alternate(pairs, tCost, churning(CHECK_RATE, false), check(CHECK_RATE));
        const extraSingle = spread(single.a.map((m, k) => m.targetCpuCores - single.b[k]!.targetCpuCores));
        rows.push(row(`gateway CPU per update @ ${label}, one message per update`, 'µs', (extraSingle.median * 1e6) / updates, perUpdateUs, 'vs batched per tick'));
        notes.push(`${label}, one gRPC message per update instead of one batch per driver tick: the gateway's extra CPU ${coresText(extraSingle)} — HTTP/2 and grpc-js work per message, which a batch shares among a tick's updates`);
        record.unbatchedExtraCores = { median: round2(extraSingle.median), min: round2(extraSingle.min), max: round2(extraSingle.max) };
        ctx.log(`churn: ${label}, Check req/s at the limit, ${pairs} pairs`);
        const limit = compareRate(await alternate(pairs, t, churning(), check()));
        rows.push(row(`Check req/s at the limit @ ${label}`, 'req/s', spread(limit.a.map((m) => m.rps)).median, spread(limit.b.map((m) => m.rps)).median, 'vs no updates'));
        targets.push(
          target(
            `${(JUDGED_RATE / 1000).toFixed(0)}k changes/s cost ≤ ${Math.round(MAX_SHARE * 100)} % of Check throughput (the gateway's extra CPU ≤ ${MAX_SHARE} of its one core)`,
            extra.median <= MAX_SHARE,
            `${coresText(extra)}, ${perUpdateUs.toFixed(1)} µs per update at ${Math.round(appliedPerSecond)} applied/s; ` +
              `Check req/s at the limit ${formatRatio(limit.ratio)} of no updates; the driver's own CPU ${round2(driverCpuUs / 1e6 / seconds)} cores`,
            judgedFigure(extra, 'cores'),
          ),
        );
        record.limit = { ratio: { median: round2(limit.ratio.median), min: round2(limit.ratio.min), max: round2(limit.ratio.max) }, churn: limit.a.map(runData), none: limit.b.map(runData) };
      }
      data[`rate-${updates}`] = record;
    }
    notes.push('the driver process shares the machine with the gateway and the load generator; its CPU is reported apart, and at the limit it takes a share of the cores the gateway could otherwise use');
    return { baseline: 'same gateway, no updates', rows, targets, notes, data };
  },
};

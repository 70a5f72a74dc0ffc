import type { Measured } from './lib/alternation.js';
import { formatDiff, grpcPair, round2, spread, trialProblems } from './lib/compare.js';
import { metricValue } from './lib/metrics.js';
import { row, target } from './lib/report.js';
import { blocks, type Section } from './lib/section.js';
import { startBare, startGateway, type Target } from './lib/targets.js';

/**
 * Each gateway is fed by a remote driver in its own process (bench-driver.ts) over the production
 * WatchSandboxes stream, so the cost is the gateway's whole path: decode, validate, apply, recompose,
 * notify. Halfway the churning and the quiet gateway swap, so each one's own offset falls on both sides.
 * A gateway answers Checks on one thread, so at its limit every core-second the updates take is a second
 * of Checks it does not answer: 0.1 extra cores is 10 % of its Check throughput.
 */

const SANDBOXES = 10_000;
const UPDATES = 10_000;
const MAX_SHARE = 0.1;
const IN_FLIGHT = 64;
/** Checks per second offered: the Check door's own rate (doors.ts), which both sides sustain. */
const CHECK_RATE = 3000;
const APPLIED = { driver: 'grpc/bench', result: 'applied' };

export const churn: Section = {
  id: 'churn',
  title: 'Churn (10k sandboxes, 10k snapshot updates/s during Check load)',
  estimateSeconds: { quick: 30, full: 60 },
  async run(ctx) {
    const plan = blocks(ctx);
    const fed: { gw: Target; driver: Target }[] = [];
    for (const name of ['a', 'b']) {
      const driver = await startBare(ctx.procs, `bench-driver-${name}`, 'lib/bench-driver.js');
      await driver.child.request('setup', { count: SANDBOXES });
      const gw = await startGateway(ctx.procs, { name: `sandgate-churn-${name}`, drivers: [`grpc://127.0.0.1:${driver.port('main')}?name=bench`] }, ctx.targetOptions);
      fed.push({ gw, driver });
    }
    ctx.log(`churn: ${UPDATES} updates/s, gateway CPU at ${CHECK_RATE} Checks/s, ${plan.blocks} pairs`);
    const c = { a: [] as Measured[], b: [] as Measured[], sent: 0, applied: 0, seconds: 0, driverUs: 0 };
    for (const [hot, quiet] of [[fed[0]!, fed[1]!], [fed[1]!, fed[0]!]] as const) {
      const before = await metricValue(hot.gw.adminUrl, 'sandgate_drivers_events_total', APPLIED);
      const cpu0 = hot.driver.cpuMicrosNow();
      await hot.driver.child.request('churn', { rate: UPDATES });
      const r = await grpcPair('check', [{ target: hot.gw, sandboxes: SANDBOXES }], [{ target: quiet.gw, sandboxes: SANDBOXES }])({ ...plan, rate: CHECK_RATE, inFlight: IN_FLIGHT, blocks: plan.blocks / 2 });
      const s = await hot.driver.child.request<{ sent: number; seconds: number }>('stop');
      c.driverUs += hot.driver.cpuMicrosNow() - cpu0;
      // Let the gateway finish what is in flight on the stream before counting.
      await new Promise((res) => setTimeout(res, 200));
      c.applied += (await metricValue(hot.gw.adminUrl, 'sandgate_drivers_events_total', APPLIED)) - before;
      c.sent += s.sent;
      c.seconds += s.seconds;
      c.a.push(...r.a);
      c.b.push(...r.b);
    }
    // Each side's CPU over the whole block, in cores: the churn runs through both halves of a block.
    const cores = (m: Measured): number => (m.targetCpuCores * m.durationMs) / plan.blockMs;
    const extra = spread(c.a.map((m, k) => cores(m) - cores(c.b[k]!)));
    const appliedPerSecond = c.applied / c.seconds;
    const perUpdateUs = (extra.median * 1e6) / Math.max(1, appliedPerSecond);
    const driverCores = c.driverUs / 1e6 / c.seconds;
    const label = `${UPDATES.toLocaleString('en-US')} updates/s`;
    const rows = [
      row(`gateway CPU @ ${label}, ${CHECK_RATE} Checks/s offered`, 'cores', spread(c.a.map(cores)).median, spread(c.b.map(cores)).median, 'vs no updates'),
      row(`gateway CPU per update @ ${label}`, 'µs', perUpdateUs, undefined),
      row(`updates applied/s @ ${label}`, '/s', appliedPerSecond, c.sent / c.seconds, 'vs sent by the driver'),
    ];
    const extraText = formatDiff(extra, 'cores', 3);
    return {
      baseline: 'a gateway with no updates',
      rows,
      targets: [
        target(
          `${UPDATES / 1000}k changes/s cost ≤ ${Math.round(MAX_SHARE * 100)} % of Check throughput (the gateway's extra CPU ≤ ${MAX_SHARE} of its one core)`,
          extra.median <= MAX_SHARE,
          `${extraText}, ${perUpdateUs.toFixed(1)} µs per update at ${Math.round(appliedPerSecond)} applied/s; the driver's own CPU ${round2(driverCores)} cores`,
        ),
      ],
      notes: [`${label}: the gateway's extra CPU ${extraText}; the driver process's own CPU ${round2(driverCores)} cores (not counted as the gateway's)`, ...trialProblems({ a: 'churning', b: 'quiet' }, c)],
    };
  },
};

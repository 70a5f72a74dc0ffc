import { GrpcLoad } from './lib/grpc-load.js';
import { abba, measured, round2, runData, runProblems, saturationNote, type Measured } from './lib/measure.js';
import { metricValue } from './lib/metrics.js';
import { row, target, type Row, type TargetResult } from './lib/report.js';
import { timing, type Section } from './lib/section.js';
import { startBare, startGateway } from './lib/targets.js';

/**
 * 5. Churn: Check throughput while the view takes 1k and 10k snapshot updates per second, against the
 * same gateway with no updates. The updates come from a remote driver in its own process (bench-driver.ts)
 * over the production WatchSandboxes stream, so the cost measured is the gateway's whole path: decode,
 * validate, apply to the view, recompose, notify.
 */

const SANDBOXES = 10_000;
const RATES = [1_000, 10_000] as const;
const JUDGED_RATE = 10_000;
const MIN_RATIO = 0.9;
const IN_FLIGHT = 64;
const APPLIED = { driver: 'grpc/bench', result: 'applied' };

export const churn: Section = {
  id: 'churn',
  title: '5. Churn (10k sandboxes, snapshot updates during Check load)',
  async run(ctx) {
    const t = timing(ctx, { warmupMs: 400, durationMs: 1600 }, { warmupMs: 1000, durationMs: 8000 });
    const driver = await startBare(ctx.procs, 'bench-driver', 'lib/bench-driver.js');
    await driver.child.request('setup', { count: SANDBOXES });
    const gw = await startGateway(ctx.procs, { name: 'sandgate-churn', drivers: [`grpc://127.0.0.1:${driver.port('main')}?name=bench`] }, ctx.targetOptions);
    const load = await GrpcLoad.start(ctx.procs, ctx.loadProcesses, ctx.grpcClient);
    const check = (w: { warmupMs: number; durationMs: number }): Promise<Measured> =>
      measured(gw, w, () => load.run({ target: gw.grpcTarget, kind: 'check', inFlight: IN_FLIGHT, ...w, sandboxes: SANDBOXES }));

    const rows: Row[] = [];
    const notes: string[] = [];
    const targets: TargetResult[] = [];
    const data: Record<string, unknown> = {};
    for (const rate of RATES) {
      ctx.log(`churn: ${rate} updates/s`);
      let sent = 0;
      let applied = 0;
      let seconds = 0;
      let driverCpuUs = 0;
      const churning = async (w: { warmupMs: number; durationMs: number }): Promise<Measured> => {
        const before = await metricValue(gw.adminUrl, 'sandgate_drivers_events_total', APPLIED);
        const cpu0 = await driver.cpuMicros();
        await driver.child.request('churn', { rate });
        const m = await check(w);
        const s = await driver.child.request<{ sent: number; seconds: number }>('stop');
        driverCpuUs += (await driver.cpuMicros()) - cpu0;
        // Let the gateway finish what is in flight on the stream before counting.
        await new Promise((r) => setTimeout(r, 200));
        applied += (await metricValue(gw.adminUrl, 'sandgate_drivers_events_total', APPLIED)) - before;
        sent += s.sent;
        seconds += s.seconds;
        return m;
      };
      const pair = await abba(t, churning, check);
      const ratio = pair.g.rps / pair.b.rps;
      // The gateway's CPU beyond what its Checks cost at the no-update rate is what the updates cost it.
      const perCheckUs = (pair.b.targetCpuCores * 1e6) / pair.b.rps;
      const updatesCores = Math.max(0, pair.g.targetCpuCores - (pair.g.rps * perCheckUs) / 1e6);
      const perUpdateUs = (updatesCores * 1e6 * seconds) / Math.max(1, applied);
      rows.push(row(`Check req/s @ ${rate.toLocaleString('en-US')} updates/s`, 'req/s', pair.g.rps, pair.b.rps, 'vs no updates'));
      rows.push(row(`Check p99 @ ${rate.toLocaleString('en-US')} updates/s`, 'µs', pair.g.latency.p99, pair.b.latency.p99, 'vs no updates'));
      rows.push(row(`updates applied/s @ ${rate.toLocaleString('en-US')} updates/s`, '/s', applied / seconds, sent / seconds, 'vs sent by the driver'));
      rows.push(row(`gateway CPU per update @ ${rate.toLocaleString('en-US')} updates/s`, 'µs', perUpdateUs, perCheckUs, 'vs per Check'));
      notes.push(...runProblems(`Check @ ${rate}/s`, pair.g), ...runProblems('Check, no updates', pair.b));
      if (rate === JUDGED_RATE) {
        targets.push(
          target(
            `${(JUDGED_RATE / 1000).toFixed(0)}k changes/s cost ≤ ${Math.round((1 - MIN_RATIO) * 100)} % of Check throughput`,
            ratio >= MIN_RATIO,
            `${ratio.toFixed(2)}× of no-churn throughput (cost ${Math.round((1 - ratio) * 100)} %); the gateway's own CPU for the updates: ` +
              `${round2(updatesCores)} cores, the driver's: ${round2(driverCpuUs / 1e6 / seconds)} cores`,
          ),
        );
        const warn = saturationNote(`Check @ ${rate}/s`, pair);
        if (warn !== undefined) notes.push(warn);
      }
      data[`rate-${rate}`] = {
        churn: runData(pair.g),
        none: runData(pair.b),
        sentPerSecond: Math.round(sent / seconds),
        appliedPerSecond: Math.round(applied / seconds),
        ratio: round2(ratio),
        gatewayCpuPerUpdateUs: Math.round(perUpdateUs),
        gatewayCpuPerCheckUs: Math.round(perCheckUs),
        driverCores: round2(driverCpuUs / 1e6 / seconds),
      };
    }
    notes.push('the driver process shares the machine with the gateway and the load generator; its own CPU is part of the churn cost here');
    return { baseline: 'same gateway, no updates', rows, targets, notes, data };
  },
};

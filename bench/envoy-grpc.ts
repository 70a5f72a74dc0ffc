import { alternate, alternateGrpc, BLOCKS, compareCost, idleNote, compareRate, costData, costNotes, costRows, costTarget, PAIRS } from './lib/cost.js';
import { GrpcLoad } from './lib/grpc-load.js';
import type { GrpcKind } from './lib/grpc-load-worker.js';
import { warmUp } from './lib/interleave.js';
import { loadRows, measured, paired, runData, runProblems } from './lib/measure.js';
import type { Row, TargetResult } from './lib/report.js';
import { writeSandboxesFile } from './lib/sandboxes.js';
import { timing, type Section, type Timing } from './lib/section.js';
import { startBare, startGateway, type Target } from './lib/targets.js';

/**
 * 2. ext_authz Check and ext_proc Process, Envoy-shaped requests for 1k Ready sandboxes, against a bare
 * grpc-js server of the same protos that answers a constant allow. Each is judged on CPU per request at a
 * fixed offered rate (cost.ts), with req/s at the limit (64 in flight) beside it; latency rows at 1, 16,
 * 64 and 256 in flight. The load client runs in its own process(es).
 */

const SANDBOXES = 1000;
const IN_FLIGHT = [1, 16, 64, 256] as const;
const JUDGED_AT = 64;
/** Offered in the cost trials: well under what either side answers on a busy 2-core machine. */
const RATE = 3000;
const MAX_EXTRA_US = 2;
const MIN_RATIO = 0.85;
const KINDS: readonly { kind: GrpcKind; label: string }[] = [
  { kind: 'check', label: 'Check' },
  { kind: 'process', label: 'Process' },
];

export const envoyGrpc: Section = {
  id: 'envoy-grpc',
  title: '2. ext_authz Check and ext_proc Process (gRPC load, 1k sandboxes)',
  async run(ctx) {
    const t = timing(ctx, { warmupMs: 250, durationMs: 800 }, { warmupMs: 1000, durationMs: 6000 });
    const tCost = timing(ctx, { warmupMs: 300, durationMs: 2000 }, { warmupMs: 1000, durationMs: 5000 });
    const pairs = PAIRS;
    const file = writeSandboxesFile(ctx.tmp, SANDBOXES, 'none');
    const gw = await startGateway(ctx.procs, { name: 'sandgate-grpc', sandboxes: file }, ctx.targetOptions);
    const bare = await startBare(ctx.procs, 'bare-grpc', 'lib/bare-grpc-server.js', ctx.targetOptions);
    const load = await GrpcLoad.start(ctx.procs, ctx.loadProcesses, ctx.grpcClient);
    const rows: Row[] = [];
    const notes: string[] = [];
    const targets: TargetResult[] = [];
    const data: Record<string, unknown> = {};
    notes.push(await idleNote('Check and Process', RATE, { sandgate: gw, 'bare grpc-js': bare }, ctx.quick ? 1000 : 3000));
    for (const { kind, label } of KINDS) {
      const at = (tgt: Target, inFlight: number) => (w: Timing) =>
        measured(tgt, w, () => load.run({ target: tgt.grpcTarget, kind, inFlight, ...w, sandboxes: SANDBOXES }));
      ctx.log(`${label}: warming both up`);
      await warmUp({ gw: at(gw, JUDGED_AT), bare: at(bare, JUDGED_AT) }, ctx.quick ? 1000 : 3000);
      ctx.log(`${label}: CPU per request at ${RATE}/s (${BLOCKS} interleaved pairs) and req/s at the limit (${pairs} pairs) @ ${JUDGED_AT} in flight`);
      const sides = { gw: { target: gw, sandboxes: SANDBOXES }, bare: { target: bare, sandboxes: SANDBOXES } };
      const cost = compareCost(RATE, await alternateGrpc(tCost, RATE, JUDGED_AT, load, kind, [sides.gw], [sides.bare]), { a: 'sandgate', b: 'bare grpc-js' });
      const rate = compareRate(await alternate(pairs, t, at(gw, JUDGED_AT), at(bare, JUDGED_AT)));
      rows.push(...costRows(`${label} @ ${JUDGED_AT} in flight`, cost, rate));
      notes.push(...costNotes(`${label} @ ${JUDGED_AT} in flight`, cost, rate));
      for (const [k, m] of rate.a.entries()) notes.push(...runProblems(`sandgate ${label} @ ${JUDGED_AT}, trial ${k + 1}`, m));
      targets.push(costTarget(`${label === 'Check' ? 'ext_authz Check' : 'ext_proc Process'} vs bare grpc-js`, MAX_EXTRA_US, cost, { r: rate, min: MIN_RATIO }));
      data[`${kind}-judged`] = costData(cost, rate);
      for (const inFlight of IN_FLIGHT) {
        if (inFlight === JUDGED_AT) continue;
        ctx.log(`${label}: ${inFlight} in flight`);
        const { g, b } = await paired(gw, bare, t, (tgt, w) => load.run({ target: tgt.grpcTarget, kind, inFlight, ...w, sandboxes: SANDBOXES }));
        rows.push(...loadRows(`${label} @ ${inFlight} in flight`, g, b));
        notes.push(...runProblems(`sandgate ${label} @ ${inFlight}`, g), ...runProblems(`bare ${label} @ ${inFlight}`, b));
        data[`${kind}-${inFlight}`] = { sandgate: runData(g), bare: runData(b) };
      }
    }
    notes.push(`load client: ${ctx.grpcClient} in ${ctx.loadProcesses} process(es)`);
    return { baseline: 'bare grpc-js, constant answer', rows, targets, notes, data };
  },
};

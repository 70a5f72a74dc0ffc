import { compareCost, compareGrpc, compareRate, costNotes, costRows, costTarget, idleNote, limitRows, trialProblems, trialsData, type GrpcSide, type RateComparison } from './lib/compare.js';
import { GrpcLoad } from './lib/grpc-load.js';
import type { GrpcKind } from './lib/grpc-load-worker.js';
import type { Row, TargetResult } from './lib/report.js';
import { writeSandboxesFile } from './lib/sandboxes.js';
import { blocks, type Section } from './lib/section.js';
import { startBare, startGateway } from './lib/targets.js';

/**
 * 2. ext_authz Check and ext_proc Process, Envoy-shaped requests for 1k Ready sandboxes, against a bare
 * grpc-js server of the same protos that answers a constant allow. Each is judged on CPU per request at a
 * fixed offered rate, with req/s at the limit (64 in flight) beside it; latency at 1, 16, 64 and 256 in
 * flight. The load client runs in its own process.
 */

const SANDBOXES = 1000;
const IN_FLIGHT = [1, 16, 64, 256] as const;
const JUDGED_AT = 64;
/** Offered in the cost trials: well under what either side answers on a busy 2-core machine. */
const RATE = 3000;
const MAX_EXTRA_US = 2;
const MIN_RATIO = 0.85;
const KINDS: readonly { kind: GrpcKind; label: string; door: string }[] = [
  { kind: 'check', label: 'Check', door: 'ext_authz Check' },
  { kind: 'process', label: 'Process', door: 'ext_proc Process' },
];

export const envoyGrpc: Section = {
  id: 'envoy-grpc',
  title: '2. ext_authz Check and ext_proc Process (gRPC load, 1k sandboxes)',
  async run(ctx) {
    const plan = blocks(ctx);
    const file = writeSandboxesFile(ctx.tmp, SANDBOXES, 'none');
    const gw = await startGateway(ctx.procs, { name: 'sandgate-grpc', sandboxes: file }, ctx.targetOptions);
    const bare = await startBare(ctx.procs, 'bare-grpc', 'lib/bare-grpc-server.js', ctx.targetOptions);
    const load = await GrpcLoad.start(ctx.procs, 1);
    const a: GrpcSide[] = [{ target: gw, sandboxes: SANDBOXES }];
    const b: GrpcSide[] = [{ target: bare, sandboxes: SANDBOXES }];
    const rows: Row[] = [];
    const notes: string[] = [await idleNote('Check and Process', RATE, { sandgate: gw, 'bare grpc-js': bare }, ctx.quick ? 1000 : 3000)];
    const targets: TargetResult[] = [];
    const data: Record<string, unknown> = {};
    for (const { kind, label, door } of KINDS) {
      ctx.log(`${label}: CPU per request at ${RATE}/s, ${plan.blocks} pairs`);
      const cost = compareCost(RATE, await compareGrpc({ ...plan, rate: RATE, inFlight: JUDGED_AT }, load, kind, a, b), { a: 'sandgate', b: 'bare grpc-js' });
      rows.push(...costRows(`${label} @ ${JUDGED_AT} in flight`, cost, undefined));
      let rate: RateComparison | undefined;
      for (const inFlight of IN_FLIGHT) {
        ctx.log(`${label}: at the limit, ${inFlight} in flight`);
        const r = await compareGrpc({ ...plan, inFlight, blocks: inFlight === JUDGED_AT ? plan.blocks : 3 }, load, kind, a, b);
        rows.push(...limitRows(`${label} @ ${inFlight} in flight`, r));
        notes.push(...trialProblems({ a: `sandgate ${label} @ ${inFlight}`, b: `bare ${label} @ ${inFlight}` }, r));
        data[`${kind}-${inFlight}`] = trialsData(r);
        if (inFlight === JUDGED_AT) rate = compareRate(r);
      }
      notes.push(...costNotes(`${label} @ ${JUDGED_AT} in flight`, cost, rate));
      targets.push(costTarget(`${door} vs bare grpc-js`, MAX_EXTRA_US, cost, { r: rate!, min: MIN_RATIO }));
      data[`${kind}-cost`] = trialsData(cost);
    }
    return { baseline: 'bare grpc-js, constant answer', rows, targets, notes, data };
  },
};

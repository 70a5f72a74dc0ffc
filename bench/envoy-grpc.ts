import { GrpcLoad } from './lib/grpc-load.js';
import type { GrpcKind } from './lib/grpc-load-worker.js';
import { loadRows, paired, round2, runData, runProblems, saturationNote, type Pair } from './lib/measure.js';
import { target, type Row, type TargetResult } from './lib/report.js';
import { writeSandboxesFile } from './lib/sandboxes.js';
import { timing, type Section } from './lib/section.js';
import { startBare, startGateway } from './lib/targets.js';

/**
 * 2. ext_authz Check and ext_proc Process under a grpc-js load client with fixed in-flight counts (1, 16,
 * 64, 256), Envoy-shaped requests for 1k Ready sandboxes, against a bare grpc-js server of the same protos
 * that answers a constant allow. The load client runs in its own process(es).
 */

const SANDBOXES = 1000;
const IN_FLIGHT = [1, 16, 64, 256] as const;
const JUDGED_AT = 64;
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
    const file = writeSandboxesFile(ctx.tmp, SANDBOXES, 'none');
    const gw = await startGateway(ctx.procs, { name: 'sandgate-grpc', sandboxes: file }, ctx.targetOptions);
    const bare = await startBare(ctx.procs, 'bare-grpc', 'lib/bare-grpc-server.js', ctx.targetOptions);
    const load = await GrpcLoad.start(ctx.procs, ctx.loadProcesses, ctx.grpcClient);
    const rows: Row[] = [];
    const notes: string[] = [];
    const targets: TargetResult[] = [];
    const data: Record<string, unknown> = {};
    for (const { kind, label } of KINDS) {
      let judged: Pair | undefined;
      for (const inFlight of IN_FLIGHT) {
        ctx.log(`${label}: ${inFlight} in flight`);
        const { g, b } = await paired(gw, bare, t, (tgt, w) => load.run({ target: tgt.grpcTarget, kind, inFlight, ...w, sandboxes: SANDBOXES }));
        rows.push(...loadRows(`${label} @ ${inFlight} in flight`, g, b));
        notes.push(...runProblems(`sandgate ${label} @ ${inFlight}`, g), ...runProblems(`bare ${label} @ ${inFlight}`, b));
        data[`${kind}-${inFlight}`] = { sandgate: runData(g), bare: runData(b) };
        if (inFlight === JUDGED_AT) judged = { g, b };
      }
      if (judged !== undefined) {
        const ratio = judged.g.rps / judged.b.rps;
        if (kind === 'check') targets.push(target(`Check ≥ ${MIN_RATIO}× bare grpc-js (req/s @ ${JUDGED_AT} in flight)`, ratio >= MIN_RATIO, `${ratio.toFixed(2)}×`));
        const warn = saturationNote(`${label} @ ${JUDGED_AT} in flight`, judged);
        if (warn !== undefined) notes.push(warn);
        notes.push(
          `${label} CPU @ ${JUDGED_AT} in flight (cores): load generator ${round2(judged.g.loadCpuCores)} / ${round2(judged.b.loadCpuCores)}, ` +
            `sandgate ${round2(judged.g.targetCpuCores)}, bare grpc-js ${round2(judged.b.targetCpuCores)}`,
        );
      }
    }
    notes.push(`load client: ${ctx.grpcClient} in ${ctx.loadProcesses} process(es)`);
    return { baseline: 'bare grpc-js, constant answer', rows, targets, notes, data };
  },
};

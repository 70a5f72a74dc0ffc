import { httpLoad } from './lib/http-load.js';
import { loadRows, paired, round2, runData, runProblems, saturationNote, type Pair } from './lib/measure.js';
import { target, type Row, type TargetResult } from './lib/report.js';
import { writeSandboxesFile } from './lib/sandboxes.js';
import { timing, type Section } from './lib/section.js';
import { startBare, startGateway } from './lib/targets.js';

/**
 * 1. HTTP authz under autocannon: sandgate's `/authz/…` (the nginx auth_request / Envoy http_service door)
 * against a bare node:http server that sends the same 200 without deciding anything, at 1, 16, 64 and 256
 * connections. The view holds 1k Ready sandboxes; requests name them by Host.
 */

const SANDBOXES = 1000;
const CONNECTIONS = [1, 16, 64, 256] as const;
/** The operating point the target is judged at. */
const JUDGED_AT = 64;
const MIN_RATIO = 0.85;

export const httpAuthz: Section = {
  id: 'http-authz',
  title: '1. HTTP authz (autocannon, 1k sandboxes)',
  async run(ctx) {
    const t = timing(ctx, { warmupMs: 250, durationMs: 1200 }, { warmupMs: 1000, durationMs: 6000 });
    const file = writeSandboxesFile(ctx.tmp, SANDBOXES, 'none');
    const gw = await startGateway(ctx.procs, { name: 'sandgate-http', sandboxes: file }, ctx.targetOptions);
    const bare = await startBare(ctx.procs, 'bare-http', 'lib/bare-http-server.js', ctx.targetOptions);
    const rows: Row[] = [];
    const notes: string[] = [];
    const data: Record<string, unknown> = {};
    let judged: Pair | undefined;
    for (const connections of CONNECTIONS) {
      ctx.log(`http authz: ${connections} connections`);
      const { g, b } = await paired(gw, bare, t, (tgt, w) => httpLoad({ url: tgt.adminUrl, connections, ...w, sandboxes: SANDBOXES }));
      rows.push(...loadRows(`@ ${connections} conn`, g, b));
      notes.push(...runProblems(`sandgate @ ${connections}`, g), ...runProblems(`bare http @ ${connections}`, b));
      data[`c${connections}`] = { sandgate: runData(g), bare: runData(b) };
      if (connections === JUDGED_AT) judged = { g, b };
    }
    const targets: TargetResult[] = [];
    if (judged !== undefined) {
      const ratio = judged.g.rps / judged.b.rps;
      targets.push(target(`HTTP authz ≥ ${MIN_RATIO}× bare http (req/s @ ${JUDGED_AT} conn)`, ratio >= MIN_RATIO, `${ratio.toFixed(2)}×`));
      const warn = saturationNote(`@ ${JUDGED_AT} conn`, judged);
      if (warn !== undefined) notes.push(warn);
      notes.push(
        `CPU @ ${JUDGED_AT} conn (cores): load generator ${round2(judged.g.loadCpuCores)} / ${round2(judged.b.loadCpuCores)}, ` +
          `sandgate ${round2(judged.g.targetCpuCores)}, bare http ${round2(judged.b.targetCpuCores)}`,
      );
    }
    return { baseline: 'bare node:http', rows, targets, notes, data };
  },
};

import { compareCost, compareGrpc, compareHttp, compareRate, costNotes, costRows, costTarget, limitRows, trialProblems, type ComparePlan, type Trials } from './lib/compare.js';
import { GrpcLoad } from './lib/grpc-load.js';
import type { Row, TargetResult } from './lib/report.js';
import { authzRequests, writeSandboxesFile } from './lib/sandboxes.js';
import { blocks, type Section } from './lib/section.js';
import { startBare, startGateway } from './lib/targets.js';

/**
 * 1. The doors Envoy and nginx call, each against a bare server of the same protocol that answers the same
 * allow without deciding anything: HTTP authz (`/authz/…`, nginx auth_request / Envoy http_service)
 * against node:http, ext_authz Check and ext_proc Process against grpc-js on the same protos. The view
 * holds 1k Ready sandboxes, requests name them at random. Each door is judged on CPU per request at a
 * fixed offered rate, with req/s at the limit (64 open) beside it, and latency at 1 and 64 open.
 */

const SANDBOXES = 1000;
const JUDGED_AT = 64;
const MAX_EXTRA_US = 2;
const MIN_RATIO = 0.85;

interface Door {
  readonly label: string;
  readonly baseline: string;
  /** Offered in the cost trials: well under what either side answers on a busy 2-core machine. */
  readonly rate: number;
  readonly open: string;
  compare(plan: ComparePlan): Promise<Trials>;
}

export const doors: Section = {
  id: 'doors',
  title: '1. Doors: HTTP authz, ext_authz Check, ext_proc Process (1k sandboxes)',
  estimateSeconds: { quick: 60, full: 240 },
  async run(ctx) {
    const plan = blocks(ctx);
    const file = writeSandboxesFile(ctx.tmp, SANDBOXES, 'none');
    const gw = await startGateway(ctx.procs, { name: 'sandgate-doors', sandboxes: file }, ctx.targetOptions);
    const bareHttp = await startBare(ctx.procs, 'bare-http', 'lib/bare-http-server.js', ctx.targetOptions);
    const bareGrpc = await startBare(ctx.procs, 'bare-grpc', 'lib/bare-grpc-server.js', ctx.targetOptions);
    const load = await GrpcLoad.start(ctx.procs, 1);
    const requests = authzRequests(SANDBOXES);
    const grpc = (kind: 'check' | 'process') => (p: ComparePlan) => compareGrpc(p, load, kind, [{ target: gw, sandboxes: SANDBOXES }], [{ target: bareGrpc, sandboxes: SANDBOXES }]);
    const list: Door[] = [
      { label: 'HTTP authz', baseline: 'bare node:http', rate: 8000, open: 'conn', compare: (p) => compareHttp(p, requests, [{ target: gw, url: gw.adminUrl }], [{ target: bareHttp, url: bareHttp.adminUrl }]) },
      { label: 'ext_authz Check', baseline: 'bare grpc-js', rate: 3000, open: 'in flight', compare: grpc('check') },
      { label: 'ext_proc Process', baseline: 'bare grpc-js', rate: 3000, open: 'in flight', compare: grpc('process') },
    ];
    const rows: Row[] = [];
    const notes: string[] = [];
    const targets: TargetResult[] = [];
    for (const door of list) {
      const at = `${door.label} @ ${JUDGED_AT} ${door.open}`;
      ctx.log(`doors: ${door.label}: CPU per request at ${door.rate} req/s, req/s at the limit, latency at 1 open`);
      const cost = compareCost(door.rate, await door.compare({ ...plan, rate: door.rate, inFlight: JUDGED_AT }), { a: 'sandgate', b: door.baseline });
      const limit = compareRate(await door.compare({ ...plan, inFlight: JUDGED_AT }));
      const single = await door.compare({ ...plan, inFlight: 1, blocks: 3 });
      rows.push(...costRows(at, cost, undefined, `vs ${door.baseline}`), ...limitRows(at, limit), ...limitRows(`${door.label} @ 1 ${door.open}`, single));
      notes.push(...costNotes(at, cost), ...trialProblems({ a: `sandgate ${at}`, b: `${door.baseline} ${at}` }, limit));
      targets.push(costTarget(`${door.label} vs ${door.baseline}`, MAX_EXTRA_US, cost, { r: limit, min: MIN_RATIO }));
    }
    return { baseline: 'a bare server of the same protocol, constant allow', rows, targets, notes };
  },
};

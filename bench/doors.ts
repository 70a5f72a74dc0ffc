import { compareRate, costTarget, Findings, grpcPair, httpPair, measureCost, type Pair } from './lib/compare.js';
import { authzRequests, writeSandboxesFile } from './lib/sandboxes.js';
import { blocks, type Section } from './lib/section.js';
import { startBare, startGateway } from './lib/targets.js';

/**
 * Each door against a bare server of the same protocol (node:http; grpc-js on the same protos) answering
 * the same allow without deciding anything: the gap is what deciding costs.
 */

const SANDBOXES = 1000;
const JUDGED_AT = 64;
const MAX_EXTRA_US = 2;
const MIN_RATIO = 0.85;

export const doors: Section = {
  id: 'doors',
  title: 'Doors: HTTP authz, ext_authz Check, ext_proc Process (1k sandboxes)',
  estimateSeconds: { quick: 60, full: 240 },
  async run(ctx) {
    const plan = blocks(ctx);
    const file = writeSandboxesFile(ctx.tmp, SANDBOXES, 'none');
    const gw = await startGateway(ctx.procs, { name: 'sandgate-doors', sandboxes: file }, ctx.targetOptions);
    const bareHttp = await startBare(ctx.procs, 'bare-http', 'lib/bare-http-server.js', ctx.targetOptions, ['authz']);
    const bareGrpc = await startBare(ctx.procs, 'bare-grpc', 'lib/bare-grpc-server.js', ctx.targetOptions);
    const grpc = (kind: 'check' | 'process') => grpcPair(kind, [{ target: gw, sandboxes: SANDBOXES }], [{ target: bareGrpc, sandboxes: SANDBOXES }]);
    // The offered rate of the cost trials: well under what either side answers on a busy 2-core machine.
    const list: { label: string; baseline: string; rate: number; open: string; pair: Pair }[] = [
      { label: 'HTTP authz', baseline: 'bare node:http', rate: 8000, open: 'conn', pair: httpPair(authzRequests(SANDBOXES), [{ target: gw, url: gw.adminUrl }], [{ target: bareHttp, url: bareHttp.adminUrl }]) },
      { label: 'ext_authz Check', baseline: 'bare grpc-js', rate: 3000, open: 'in flight', pair: grpc('check') },
      { label: 'ext_proc Process', baseline: 'bare grpc-js', rate: 3000, open: 'in flight', pair: grpc('process') },
    ];
    const f = new Findings();
    for (const door of list) {
      const at = `${door.label} @ ${JUDGED_AT} ${door.open}`;
      const names = { a: 'sandgate', b: door.baseline };
      ctx.log(`doors: ${door.label}: CPU per request at ${door.rate} req/s, req/s at the limit, latency at 1 open`);
      const cost = await measureCost(door.pair, { ...plan, inFlight: JUDGED_AT }, door.rate, names);
      const limit = compareRate(await door.pair({ ...plan, inFlight: JUDGED_AT }));
      f.cost(at, cost, { note: `vs ${door.baseline}` });
      f.limit(at, limit, names);
      f.limit(`${door.label} @ 1 ${door.open}`, await door.pair({ ...plan, inFlight: 1, blocks: 3 }), names);
      f.targets.push(costTarget(`${door.label} vs ${door.baseline}`, MAX_EXTRA_US, cost, { r: limit, min: MIN_RATIO }));
    }
    return f.output('a bare server of the same protocol, constant allow');
  },
};

import { compareRate, costTarget, Findings, grpcPair, httpPair, measureCost, type CostComparison, type Pair, type Spread } from './lib/compare.js';
import { target } from './lib/report.js';
import { authzRequests, writeSandboxesFile } from './lib/sandboxes.js';
import { blocks, type Section } from './lib/section.js';
import { startBare, startGateway } from './lib/targets.js';

/**
 * Each door against a bare server of the same protocol (node:http; grpc-js on the same protos) answering
 * the same allow without deciding anything: the gap is what deciding costs. Then the paced shape, as Envoy
 * calls one sandgate: a few HTTP/2 connections with a few streams each at a fixed rate, the gRPC doors
 * against node:http2 answering with a reply encoded once (the floor of gRPC on node:http2) and HTTP authz
 * against node:http. At both shapes a gRPC door's CPU per request is judged against HTTP authz's from
 * the same run: the same decision, another protocol.
 */

const SANDBOXES = 1000;
const JUDGED_AT = 64;
const MAX_EXTRA_US = 2;
const MIN_RATIO = 0.85;
const PACED = { connections: 8, streams: 4, rate: 1500, httpConnections: 16 } as const;
/** A gRPC door may cost at most this many times HTTP authz's CPU per request. */
const MAX_GRPC_OVER_HTTP = 2;

/** `a`'s CPU per request over `b`'s, by medians, with the range the two spreads allow. */
function ratioTarget(name: string, a: CostComparison, b: CostComparison): ReturnType<typeof target> {
  const r = (x: Spread, y: Spread) => ({ median: x.median / y.median, lo: x.min / y.max, hi: x.max / y.min });
  const q = r(a.aUs, b.aUs);
  const detail = `${q.median.toFixed(2)}× (spread ${q.lo.toFixed(2)} … ${q.hi.toFixed(2)}; ${a.aUs.median.toFixed(1)} vs ${b.aUs.median.toFixed(1)} µs)`;
  return target(`${name} ≤ ${MAX_GRPC_OVER_HTTP}× HTTP authz's CPU per request`, Number.isFinite(q.median) ? q.median <= MAX_GRPC_OVER_HTTP : undefined, detail);
}

export const doors: Section = {
  id: 'doors',
  title: 'Doors: HTTP authz, ext_authz Check, ext_proc Process (1k sandboxes)',
  estimateSeconds: { quick: 90, full: 330 },
  async run(ctx) {
    const plan = blocks(ctx);
    const file = writeSandboxesFile(ctx.tmp, SANDBOXES, 'none');
    const gw = await startGateway(ctx.procs, { name: 'sandgate-doors', sandboxes: file }, ctx.targetOptions);
    const bareHttp = await startBare(ctx.procs, 'bare-http', 'lib/bare-http-server.js', ctx.targetOptions, ['authz']);
    const bareGrpc = await startBare(ctx.procs, 'bare-grpc', 'lib/bare-grpc-server.js', ctx.targetOptions);
    const bareH2 = await startBare(ctx.procs, 'bare-h2', 'lib/bare-h2-grpc-server.js', ctx.targetOptions);
    const grpc = (kind: 'check' | 'process') => grpcPair(kind, [{ target: gw, sandboxes: SANDBOXES }], [{ target: bareGrpc, sandboxes: SANDBOXES }]);
    // The offered rate of the cost trials: well under what either side answers on a busy 2-core machine.
    const list: { label: string; baseline: string; rate: number; open: string; pair: Pair }[] = [
      { label: 'HTTP authz', baseline: 'bare node:http', rate: 8000, open: 'conn', pair: httpPair(authzRequests(SANDBOXES), [{ target: gw, url: gw.adminUrl }], [{ target: bareHttp, url: bareHttp.adminUrl }]) },
      { label: 'ext_authz Check', baseline: 'bare grpc-js', rate: 3000, open: 'in flight', pair: grpc('check') },
      { label: 'ext_proc Process', baseline: 'bare grpc-js', rate: 3000, open: 'in flight', pair: grpc('process') },
    ];
    const f = new Findings();
    const costs = new Map<string, CostComparison>();
    for (const door of list) {
      const at = `${door.label} @ ${JUDGED_AT} ${door.open}`;
      const names = { a: 'sandgate', b: door.baseline };
      ctx.log(`doors: ${door.label}: CPU per request at ${door.rate} req/s, req/s at the limit, latency at 1 open`);
      const cost = await measureCost(door.pair, { ...plan, inFlight: JUDGED_AT }, door.rate, names);
      costs.set(door.label, cost);
      const limit = compareRate(await door.pair({ ...plan, inFlight: JUDGED_AT }));
      f.cost(at, cost, { note: `vs ${door.baseline}` });
      f.limit(at, limit, names);
      f.limit(`${door.label} @ 1 ${door.open}`, await door.pair({ ...plan, inFlight: 1, blocks: 3 }), names);
      f.targets.push(costTarget(`${door.label} vs ${door.baseline}`, MAX_EXTRA_US, cost, { r: limit, min: MIN_RATIO }));
    }
    const paced = { ...plan, inFlight: PACED.connections * PACED.streams };
    const shape = `${PACED.connections} conn × ${PACED.streams} streams`;
    const pacedCost = async (label: string, pair: Pair, inFlight: number, baseline: string): Promise<CostComparison> => {
      ctx.log(`doors: ${label}, paced: CPU per request at ${PACED.rate} req/s`);
      const cost = await measureCost(pair, { ...paced, inFlight }, PACED.rate, { a: 'sandgate', b: baseline });
      f.cost(`${label} @ ${inFlight === paced.inFlight ? shape : `${inFlight} conn`} (paced)`, cost, { note: `vs ${baseline}` });
      return cost;
    };
    const h2Pair = (kind: 'check' | 'process') => grpcPair(kind, [{ target: gw, sandboxes: SANDBOXES }], [{ target: bareH2, sandboxes: SANDBOXES }], PACED.connections);
    const pacedHttp = await pacedCost('HTTP authz', list[0]!.pair, PACED.httpConnections, 'bare node:http');
    for (const [label, kind] of [['ext_authz Check', 'check'], ['ext_proc Process', 'process']] as const) {
      const cost = await pacedCost(label, h2Pair(kind), paced.inFlight, 'bare node:http2, reply encoded once');
      f.targets.push(ratioTarget(`${label} @ ${JUDGED_AT} in flight`, costs.get(label)!, costs.get('HTTP authz')!));
      f.targets.push(ratioTarget(`${label} @ ${shape}`, cost, pacedHttp));
    }
    return f.output('a bare server of the same protocol, constant allow');
  },
};

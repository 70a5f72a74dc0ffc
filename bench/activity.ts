import { compareCost, compareGrpc, compareHttp, costNotes, costRows, trialsData, type GrpcSide, type HttpSide } from './lib/compare.js';
import { GrpcLoad } from './lib/grpc-load.js';
import { loopbackHost, probe, proxyRequests, UPSTREAM_BODY, writeLoopbackSandboxesFile } from './lib/loopback-sandboxes.js';
import type { Row } from './lib/report.js';
import { blocks, type Section } from './lib/section.js';
import { startBare, startGateway, type Target } from './lib/targets.js';

/**
 * 13. What activity tracking costs a request: two gateways alike but for `--activity-ignore` — one whose
 * pattern (`/healthz`) none of the bench's paths match, so every allowed request bumps its sandbox's
 * activity, and one whose pattern (`/*`) matches every path, so no request does. Both test the same
 * pattern on every request; the difference is the recorder's bump alone. CPU per request of the gateway
 * process at a fixed offered rate, through the embedded proxy (as sections 3 and 12 load it) and through
 * ext_authz Check (as section 2 does); reported beside those doors' figures, not judged.
 */

const SANDBOXES = 1000;
const PROXY_RATE = 1500;
const PROXY_CONNECTIONS = 10;
const CHECK_RATE = 3000;
const CHECK_IN_FLIGHT = 64;
const NOTE = 'vs the same gateway with every path matching --activity-ignore';

export const activity: Section = {
  id: 'activity',
  title: '13. Activity tracking, per proxied request and per Check',
  async run(ctx) {
    const upstream = await startBare(ctx.procs, 'upstream', 'lib/upstream-server.js', ctx.targetOptions);
    const sandboxes = writeLoopbackSandboxesFile(ctx.tmp, SANDBOXES);
    const recorded = await startGateway(ctx.procs, { name: 'sandgate-activity-recorded', sandboxes, args: ['--activity-ignore', '/healthz'] }, ctx.targetOptions);
    const ignored = await startGateway(ctx.procs, { name: 'sandgate-activity-ignored', sandboxes, args: ['--activity-ignore', '/*'] }, ctx.targetOptions);
    const http = (t: Target): HttpSide[] => [{ target: t, url: `http://127.0.0.1:${t.port('proxy')}` }];
    const grpc = (t: Target): GrpcSide[] => [{ target: t, sandboxes: SANDBOXES }];
    const host = loopbackHost(0, upstream.port('main'));
    for (const t of [recorded, ignored]) {
      const r = await probe(http(t)[0]!.url, host);
      if (r.status !== 200 || r.body !== UPSTREAM_BODY) throw new Error(`${t.name} did not reach the bench upstream: ${r.status}`);
    }
    const names = { a: 'recorded', b: 'every path ignored' };
    const plan = blocks(ctx);
    const rows: Row[] = [];
    const notes: string[] = [];

    ctx.log(`activity: proxy, CPU per request at ${PROXY_RATE} req/s @ ${PROXY_CONNECTIONS} conn, recorded vs ignored`);
    const proxied = compareCost(PROXY_RATE, await compareHttp({ ...plan, rate: PROXY_RATE, inFlight: PROXY_CONNECTIONS }, proxyRequests(SANDBOXES, upstream.port('main')), http(recorded), http(ignored)), names);
    rows.push(...costRows(`proxied @ ${PROXY_CONNECTIONS} conn`, proxied, undefined, NOTE));
    notes.push(...costNotes(`proxy, recorded vs ignored`, proxied, undefined));

    ctx.log(`activity: Check, CPU per request at ${CHECK_RATE}/s @ ${CHECK_IN_FLIGHT} in flight, recorded vs ignored`);
    const load = await GrpcLoad.start(ctx.procs, 1);
    const checked = compareCost(CHECK_RATE, await compareGrpc({ ...plan, rate: CHECK_RATE, inFlight: CHECK_IN_FLIGHT }, load, 'check', grpc(recorded), grpc(ignored)), names);
    rows.push(...costRows(`Check @ ${CHECK_IN_FLIGHT} in flight`, checked, undefined, NOTE));
    notes.push(...costNotes(`Check, recorded vs ignored`, checked, undefined));

    return { baseline: 'the same gateway with every path matching --activity-ignore (no activity recorded)', rows, targets: [], notes, data: { proxy: trialsData(proxied), check: trialsData(checked) } };
  },
};

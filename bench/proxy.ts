import { compareCost, compareHttp, compareRate, costNotes, costRows, costTarget, floorText, formatRatio, idleNote, INSTANCES, limitRows, trialProblems, trialsData, type HttpSide, type Trials } from './lib/compare.js';
import { loopbackHost, probe, proxyRequests, UPSTREAM_BODY, writeLoopbackSandboxesFile } from './lib/loopback-sandboxes.js';
import { findNginx, startNginx } from './lib/nginx.js';
import { CombinedTarget } from './lib/proc-cpu.js';
import { target, type Row, type TargetResult } from './lib/report.js';
import { blocks, type BenchContext, type Section } from './lib/section.js';
import { startBare, startGateway, type Target } from './lib/targets.js';

/**
 * 3. The embedded proxy, every request carried to a small upstream on loopback. Judged against a plain
 * undici forwarder (no routing: the floor of a Node proxy) on CPU per request of the proxy process at a
 * fixed offered rate, over INSTANCES pairs of processes, with req/s at the limit beside it, at 10 and at
 * 64 connections, and the same trials between further copies of the forwarder and the forwarders (the
 * noise floor) beside the verdict. At the limit it is also set beside the load sent straight to the
 * upstream, and beside nginx `auth_request` to sandgate's HTTP authz (sandgate the nginx way, without
 * Envoy), each tier's CPU counted whole (proxy, authz and upstream processes).
 */

const SANDBOXES = 1000;
const CONNECTIONS = [10, 64] as const;
const JUDGED_AT = 64;
/** Offered in the cost trials: proxy and upstream share the machine, and each answers far more than this. */
const RATE = 1500;
const MAX_EXTRA_US = 5;
const MIN_VS_FORWARDER = 0.9;

const url = (t: Target, port = 'main'): string => `http://127.0.0.1:${t.port(port)}`;

/** nginx auth_request → a gateway of its own → the upstream, as one tier, or why it was not measured. */
async function nginxTier(ctx: BenchContext, upstream: Target, sandboxes: string): Promise<HttpSide | string> {
  const found = await findNginx();
  if ('skipped' in found) return `nginx rows skipped: ${found.skipped}`;
  const authz = await startGateway(ctx.procs, { name: 'sandgate-authz', sandboxes }, ctx.targetOptions);
  const nginx = await startNginx(ctx.procs, ctx.tmp, found.bin, { adminPort: authz.port('admin') });
  return { target: new CombinedTarget([nginx, authz, upstream]), url: url(nginx) };
}

export const proxy: Section = {
  id: 'proxy',
  title: '3. Embedded proxy (vs a plain undici forwarder, direct, and nginx auth_request)',
  async run(ctx) {
    const plan = blocks(ctx);
    const upstream = await startBare(ctx.procs, 'upstream', 'lib/upstream-server.js', ctx.targetOptions);
    const upstreamAddress = `127.0.0.1:${upstream.port('main')}`;
    const sandboxes = writeLoopbackSandboxesFile(ctx.tmp, SANDBOXES);
    const gws: HttpSide[] = [];
    const forwarders: HttpSide[] = [];
    const copies: HttpSide[] = [];
    for (let i = 1; i <= INSTANCES; i++) {
      const gw = await startGateway(ctx.procs, { name: `sandgate-proxy-${i}`, sandboxes }, ctx.targetOptions);
      gws.push({ target: gw, url: url(gw, 'proxy') });
      for (const [list, name] of [[forwarders, 'undici-forwarder'], [copies, 'undici-forwarder-copy']] as const) {
        const f = await startBare(ctx.procs, `${name}-${i}`, 'lib/undici-forwarder.js', ctx.targetOptions, [upstreamAddress]);
        list.push({ target: f, url: url(f) });
      }
    }
    const notes: string[] = [];
    const nginx = await nginxTier(ctx, upstream, sandboxes).catch((err: unknown) => `nginx rows skipped: ${err instanceof Error ? err.message.split('\n')[0] : String(err)}`);
    if (typeof nginx === 'string') notes.push(nginx);
    const direct: HttpSide = { target: upstream, url: `http://${upstreamAddress}` };
    // Every side must carry a request to the bench's upstream, and nowhere else, before any load.
    const host = loopbackHost(0, upstream.port('main'));
    for (const s of [...gws, ...forwarders, ...copies, direct, ...(typeof nginx === 'string' ? [] : [nginx])]) {
      const r = await probe(s.url, host);
      if (r.status !== 200 || r.body !== UPSTREAM_BODY) throw new Error(`${s.target.name} (${s.url}) did not reach the bench upstream: ${r.status} ${r.body.slice(0, 200)}`);
    }
    const requests = proxyRequests(SANDBOXES, upstream.port('main'));
    const rows: Row[] = [];
    const targets: TargetResult[] = [];
    const data: Record<string, unknown> = {};
    notes.push(await idleNote('embedded proxy vs forwarder', RATE, { 'embedded proxy': gws[0]!.target, forwarder: forwarders[0]!.target }, ctx.quick ? 1000 : 3000));

    for (const c of CONNECTIONS) {
      ctx.log(`proxy: embedded proxy vs forwarder @ ${c} connections: CPU per request at ${RATE} req/s, the noise floor, req/s at the limit`);
      const cost = compareCost(RATE, await compareHttp({ ...plan, rate: RATE, inFlight: c }, requests, gws, forwarders), { a: 'embedded proxy', b: 'forwarder' });
      const floor = compareCost(RATE, await compareHttp({ ...plan, rate: RATE, inFlight: c }, requests, copies, forwarders), { a: 'copy', b: 'forwarder' });
      const rate = compareRate(await compareHttp({ ...plan, inFlight: c }, requests, gws, forwarders));
      rows.push(...costRows(`@ ${c} conn`, cost, rate, 'vs undici forwarder, the proxy process alone'));
      notes.push(`embedded proxy vs forwarder @ ${c} conn: ${floorText(floor)}`, ...costNotes(`embedded proxy vs forwarder @ ${c} conn`, cost, rate));
      notes.push(...trialProblems({ a: `embedded proxy @ ${c}`, b: `forwarder @ ${c}` }, rate));
      targets.push(costTarget(`embedded proxy vs the plain undici forwarder @ ${c} conn`, MAX_EXTRA_US, cost, { r: rate, min: MIN_VS_FORWARDER }, floor));
      data[`c${c}`] = { cost: trialsData(cost), floor: trialsData(floor), limit: trialsData(rate) };
    }

    // At the limit, the embedded proxy's whole tier (proxy and upstream) beside the others.
    const tier: HttpSide = { target: new CombinedTarget([gws[0]!.target, upstream]), url: gws[0]!.url };
    const atLimit = (other: HttpSide): Promise<Trials> => compareHttp({ ...plan, inFlight: JUDGED_AT }, requests, [tier], [other]);
    ctx.log(`proxy: @ ${JUDGED_AT} connections, embedded proxy vs direct to the upstream`);
    const vsDirect = await atLimit(direct);
    rows.push(...limitRows(`embedded proxy @ ${JUDGED_AT} conn`, vsDirect, 'vs direct to upstream'));
    data.direct = trialsData(vsDirect);
    const name = `embedded proxy ahead of nginx auth_request → sandgate (req/s @ ${JUDGED_AT} conn)`;
    if (typeof nginx === 'string') targets.push(target(name, undefined, nginx));
    else {
      ctx.log(`proxy: @ ${JUDGED_AT} connections, embedded proxy vs nginx auth_request → sandgate`);
      const vsNginx = compareRate(await atLimit(nginx));
      rows.push(...limitRows(`embedded proxy @ ${JUDGED_AT} conn`, vsNginx, 'vs nginx auth_request → sandgate'));
      notes.push(...trialProblems({ a: 'embedded proxy', b: 'nginx auth_request' }, vsNginx));
      targets.push(target(name, vsNginx.ratio.median > 1, formatRatio(vsNginx.ratio)));
      data.nginx = trialsData(vsNginx);
    }
    return { baseline: 'as each row says', rows, targets, notes, data };
  },
};

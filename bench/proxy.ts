import { compareRate, costTarget, Findings, formatRatio, httpPair, INSTANCES, measureCost, type HttpSide } from './lib/compare.js';
import { startUpstream } from './lib/sandboxes.js';
import { authRequestServer, findNginx, startNginx } from './lib/nginx.js';
import { CombinedTarget } from './lib/proc-cpu.js';
import { target } from './lib/report.js';
import { blocks, type BenchContext, type Section } from './lib/section.js';
import { startBare, startGateway, type Target } from './lib/targets.js';

/**
 * The baseline is a plain undici forwarder, the floor of a Node proxy: the gap is the cost of routing and
 * deciding. nginx `auth_request` to sandgate's HTTP authz is sandgate the nginx way, without Envoy; it is
 * compared as whole tiers (proxy, authz and upstream processes), since its work is split over two.
 */

const SANDBOXES = 1000;
const CONNECTIONS = 64;
/** Offered in the cost trials: proxy and upstream share the machine, and each answers far more than this. */
const RATE = 1500;
const MAX_EXTRA_US = 5;
const MIN_VS_FORWARDER = 0.9;
const NGINX_TARGET = `embedded proxy ahead of nginx auth_request → sandgate (req/s @ ${CONNECTIONS} conn)`;

/** nginx auth_request → a gateway of its own → the upstream, as one tier, or why it was not measured. */
async function nginxTier(ctx: BenchContext, upstream: Target, sandboxes: string): Promise<HttpSide | string> {
  const found = findNginx(['http_auth_request_module']);
  if ('skipped' in found) return `nginx rows skipped: ${found.skipped}`;
  const authz = await startGateway(ctx.procs, { name: 'sandgate-authz', sandboxes }, ctx.targetOptions);
  const nginx = await startNginx(ctx.procs, ctx.tmp, found.bin, authRequestServer(authz.port('admin')));
  return { target: new CombinedTarget([nginx, authz, upstream]), url: nginx.url('main') };
}

export const proxy: Section = {
  id: 'proxy',
  title: 'Embedded proxy (vs a plain undici forwarder and nginx auth_request)',
  estimateSeconds: { quick: 40, full: 120 },
  async run(ctx) {
    const plan = blocks(ctx);
    const upstream = await startUpstream(ctx, SANDBOXES);
    const { sandboxes } = upstream;
    const gws: HttpSide[] = [];
    const forwarders: HttpSide[] = [];
    for (let i = 1; i <= INSTANCES; i++) {
      const gw = await startGateway(ctx.procs, { name: `sandgate-proxy-${i}`, sandboxes }, ctx.targetOptions);
      gws.push({ target: gw, url: gw.url('proxy') });
      const f = await startBare(ctx.procs, `undici-forwarder-${i}`, 'lib/undici-forwarder.js', ctx.targetOptions, [`127.0.0.1:${upstream.port}`]);
      forwarders.push({ target: f, url: f.url('main') });
    }
    const nginx = await nginxTier(ctx, upstream.target, sandboxes).catch((err: unknown) => `nginx rows skipped: ${err instanceof Error ? err.message.split('\n')[0] : String(err)}`);
    await upstream.reachedBy([...gws, ...forwarders, ...(typeof nginx === 'string' ? [] : [nginx])]);
    const requests = upstream.requests(SANDBOXES);
    const at = `@ ${CONNECTIONS} conn`;
    const f = new Findings();

    ctx.log(`proxy: embedded proxy vs forwarder ${at}: CPU per request at ${RATE} req/s, req/s at the limit`);
    const vsForwarder = httpPair(requests, gws, forwarders);
    const cost = await measureCost(vsForwarder, { ...plan, inFlight: CONNECTIONS }, RATE, { a: 'embedded proxy', b: 'forwarder' });
    const rate = compareRate(await vsForwarder({ ...plan, inFlight: CONNECTIONS }));
    f.cost(at, cost, { note: 'vs undici forwarder, the proxy process alone', limit: rate, title: `embedded proxy vs forwarder ${at}` });
    f.targets.push(costTarget(`embedded proxy vs the plain undici forwarder ${at}`, MAX_EXTRA_US, cost, { r: rate, min: MIN_VS_FORWARDER }));

    if (typeof nginx === 'string') {
      f.notes.push(nginx);
      f.targets.push(target(NGINX_TARGET, undefined, nginx));
    } else {
      ctx.log(`proxy: ${at}, embedded proxy (with its upstream) vs nginx auth_request → sandgate`);
      const tier: HttpSide = { target: new CombinedTarget([gws[0]!.target, upstream.target]), url: gws[0]!.url };
      const vsNginx = compareRate(await httpPair(requests, [tier], [nginx])({ ...plan, inFlight: CONNECTIONS }));
      f.limit(`embedded proxy ${at}`, vsNginx, { a: 'embedded proxy', b: 'nginx auth_request' }, 'vs nginx auth_request → sandgate, whole tiers');
      f.targets.push(target(NGINX_TARGET, vsNginx.ratio.median > 1, formatRatio(vsNginx.ratio)));
    }
    return f.output('as each row says');
  },
};

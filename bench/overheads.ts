import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { Findings, grpcPair, httpPair, measureCost, type HttpSide } from './lib/compare.js';
import { checkReachesUpstream, proxyRequests, writeSandboxesFile } from './lib/sandboxes.js';
import { blocks, type Section } from './lib/section.js';
import { startBare, startGateway, type GatewaySpec, type Target } from './lib/targets.js';

/**
 * What the optional work costs a request: gateways alike but for one feature each — tracing (every
 * request sampled, and 1 %; spans exported over OTLP/HTTP to a sink in the runner that drops them), the
 * access log to a file, activity tracking (`--activity-ignore /healthz`, which no bench path matches) —
 * each against the same gateway with all of it off (`--activity-ignore '/*'`: the pattern is still
 * tested, nothing recorded). CPU per request of the gateway process at a fixed offered rate through the
 * embedded proxy, and for activity through ext_authz Check too. Reported, not judged.
 */

const SANDBOXES = 1000;
const PROXY_RATE = 1500;
const CONNECTIONS = 10;
const CHECK_RATE = 3000;
const CHECK_IN_FLIGHT = 64;
const OFF = ['--activity-ignore', '/*'];

export const overheads: Section = {
  id: 'overheads',
  title: 'Overheads: tracing, the access log and activity tracking, per request',
  estimateSeconds: { quick: 60, full: 180 },
  async run(ctx) {
    const sink = createServer((req, res) => {
      req.resume();
      req.on('end', () => res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end());
    });
    await new Promise<void>((r) => sink.listen(0, '127.0.0.1', () => r()));
    try {
      const endpoint = `http://127.0.0.1:${(sink.address() as AddressInfo).port}`;
      const upstream = await startBare(ctx.procs, 'upstream', 'lib/upstream-server.js', ctx.targetOptions);
      const sandboxes = writeSandboxesFile(ctx.tmp, SANDBOXES, 'none', true);
      const gateway = (spec: GatewaySpec): Promise<Target> => startGateway(ctx.procs, { sandboxes, ...spec }, ctx.targetOptions);
      const off = await gateway({ name: 'sandgate-all-off', args: OFF });
      const activity = await gateway({ name: 'sandgate-activity', args: ['--activity-ignore', '/healthz'] });
      const variants: [string, Target][] = [
        ['tracing, 100 % sampled', await gateway({ name: 'sandgate-traced-100', args: OFF, env: { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, OTEL_TRACES_SAMPLER: 'parentbased_always_on' } })],
        ['tracing, 1 % sampled', await gateway({ name: 'sandgate-traced-1', args: OFF, env: { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.01' } })],
        ['access log to a file', await gateway({ name: 'sandgate-access-log', args: [...OFF, '--access-log', join(ctx.tmp, 'access.log')] })],
        ['activity tracking', activity],
      ];
      const http = (t: Target): HttpSide => ({ target: t, url: t.url('proxy') });
      await checkReachesUpstream([off, ...variants.map(([, t]) => t)].map(http), upstream.port('main'));
      const requests = proxyRequests(SANDBOXES, upstream.port('main'));
      const plan = blocks(ctx);
      const f = new Findings();
      const note = 'vs the same gateway with all of it off';
      for (const [label, t] of variants) {
        ctx.log(`overheads: ${label} vs all off, proxied, CPU per request at ${PROXY_RATE} req/s @ ${CONNECTIONS} conn`);
        const cost = await measureCost(httpPair(requests, [http(t)], [http(off)]), { ...plan, inFlight: CONNECTIONS }, PROXY_RATE, { a: label, b: 'all off' });
        f.cost(`proxied with ${label} @ ${CONNECTIONS} conn`, cost, { note });
      }
      ctx.log(`overheads: activity tracking vs all off, Check at ${CHECK_RATE}/s @ ${CHECK_IN_FLIGHT} in flight`);
      const checks = grpcPair('check', [{ target: activity, sandboxes: SANDBOXES }], [{ target: off, sandboxes: SANDBOXES }]);
      const cost = await measureCost(checks, { ...plan, inFlight: CHECK_IN_FLIGHT }, CHECK_RATE, { a: 'activity tracking', b: 'all off' });
      f.cost(`Check with activity tracking @ ${CHECK_IN_FLIGHT} in flight`, cost, { note });
      return f.output('the same gateway with tracing, the access log and activity tracking off');
    } finally {
      await new Promise((r) => sink.close(r));
    }
  },
};

import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { Findings, grpcPair, httpPair, measureCost, type HttpSide } from './lib/compare.js';
import { startUpstream } from './lib/sandboxes.js';
import { blocks, type Section } from './lib/section.js';
import { startGateway, type GatewaySpec, type Target } from './lib/targets.js';

/**
 * Gateways alike but for one feature each, against the same gateway with all of it off. Spans go over
 * OTLP/HTTP to a sink in the runner that drops them; activity is on with `--activity-ignore /healthz`
 * (no bench path matches) and off with `--activity-ignore '/*'`, so the pattern is tested either way.
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
      const upstream = await startUpstream(ctx, SANDBOXES);
      const gateway = (spec: GatewaySpec): Promise<Target> => startGateway(ctx.procs, { sandboxes: upstream.sandboxes, ...spec }, ctx.targetOptions);
      const off = await gateway({ name: 'sandgate-all-off', args: OFF });
      const activity = await gateway({ name: 'sandgate-activity', args: ['--activity-ignore', '/healthz'] });
      const variants: [string, Target][] = [
        ['tracing, 100 % sampled', await gateway({ name: 'sandgate-traced-100', args: OFF, env: { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, OTEL_TRACES_SAMPLER: 'parentbased_always_on' } })],
        ['tracing, 1 % sampled', await gateway({ name: 'sandgate-traced-1', args: OFF, env: { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.01' } })],
        ['access log to a file', await gateway({ name: 'sandgate-access-log', args: [...OFF, '--access-log', join(ctx.tmp, 'access.log')] })],
        ['activity tracking', activity],
      ];
      const http = (t: Target): HttpSide => ({ target: t, url: t.url('proxy') });
      await upstream.reachedBy([off, ...variants.map(([, t]) => t)].map(http));
      const requests = upstream.requests(SANDBOXES);
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

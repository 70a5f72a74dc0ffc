import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { compareCost, compareHttp, costNotes, costRows, trialsData, type HttpSide } from './lib/compare.js';
import { loopbackHost, probe, proxyRequests, UPSTREAM_BODY, writeLoopbackSandboxesFile } from './lib/loopback-sandboxes.js';
import type { Row } from './lib/report.js';
import { blocks, type Section } from './lib/section.js';
import { startBare, startGateway, type GatewaySpec } from './lib/targets.js';

/**
 * 12. What observability costs a request through the embedded proxy: the same gateway with tracing on
 * (every request sampled, and 1 %), and with the access log on (to a file), each against one with all of
 * it off — CPU per request of the proxy process at a fixed offered rate, as section 3 judges the proxy.
 * Spans go to an OTLP/HTTP sink in the runner that accepts and drops them (the exporter's work is
 * counted; a collector's is not).
 */

const SANDBOXES = 1000;
const RATE = 1500;
const CONNECTIONS = 10;

export const observability: Section = {
  id: 'observability',
  title: '12. Observability: tracing (100 % and 1 % sampled) and the access log, per proxied request',
  async run(ctx) {
    const sink = createServer((req, res) => {
      req.resume();
      req.on('end', () => res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end());
    });
    await new Promise<void>((r) => sink.listen(0, '127.0.0.1', () => r()));
    try {
      const endpoint = `http://127.0.0.1:${(sink.address() as AddressInfo).port}`;
      const upstream = await startBare(ctx.procs, 'upstream', 'lib/upstream-server.js', ctx.targetOptions);
      const sandboxes = writeLoopbackSandboxesFile(ctx.tmp, SANDBOXES);
      const side = async (spec: GatewaySpec): Promise<HttpSide> => {
        const gw = await startGateway(ctx.procs, { sandboxes, ...spec }, ctx.targetOptions);
        return { target: gw, url: `http://127.0.0.1:${gw.port('proxy')}` };
      };
      const off = await side({ name: 'sandgate-observability-off' });
      const variants: [string, HttpSide][] = [
        ['tracing, 100 % sampled', await side({ name: 'sandgate-traced-100', env: { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, OTEL_TRACES_SAMPLER: 'parentbased_always_on' } })],
        ['tracing, 1 % sampled', await side({ name: 'sandgate-traced-1', env: { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.01' } })],
        ['access log to a file', await side({ name: 'sandgate-access-log', args: ['--access-log', join(ctx.tmp, 'access.log')] })],
      ];
      const host = loopbackHost(0, upstream.port('main'));
      for (const s of [off, ...variants.map(([, v]) => v)]) {
        const r = await probe(s.url, host);
        if (r.status !== 200 || r.body !== UPSTREAM_BODY) throw new Error(`${s.target.name} did not reach the bench upstream: ${r.status}`);
      }
      const requests = proxyRequests(SANDBOXES, upstream.port('main'));
      const rows: Row[] = [];
      const notes: string[] = [];
      const data: Record<string, unknown> = {};
      for (const [label, v] of variants) {
        ctx.log(`observability: ${label} vs all off, CPU per request at ${RATE} req/s @ ${CONNECTIONS} conn`);
        const cost = compareCost(RATE, await compareHttp({ ...blocks(ctx), rate: RATE, inFlight: CONNECTIONS }, requests, [v], [off]), { a: label, b: 'all off' });
        rows.push(...costRows(`with ${label} @ ${CONNECTIONS} conn`, cost, undefined, 'vs the same proxy with tracing and access log off'));
        notes.push(...costNotes(`${label} vs all off`, cost, undefined));
        data[label] = trialsData(cost);
      }
      return { baseline: 'the embedded proxy with tracing and the access log off', rows, targets: [], notes, data };
    } finally {
      await new Promise((r) => sink.close(r));
    }
  },
};

import { execFileSync } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { Findings, grpcPair, httpPair, measureCost, medianOf, trialProblems, type HttpSide } from './lib/compare.js';
import { benchScript, CLI } from './lib/machine.js';
import { row } from './lib/report.js';
import { startUpstream } from './lib/sandboxes.js';
import { blocks, type BenchContext, type Section } from './lib/section.js';
import { startGateway, type GatewaySpec, type Target } from './lib/targets.js';

/**
 * Gateways alike but for one feature each, against the same gateway with all of it off. Spans go over
 * OTLP/HTTP to a sink in the runner that drops them; activity is on with `--activity-ignore /healthz`
 * (no bench path matches) and off with `--activity-ignore '/*'`, so the pattern is tested either way.
 * Link revocations are one tenant's work landing on others: a tenant revoking links through the operator
 * API (REVOKERS loops in a process of their own, into the file store) while the bench's own tenants'
 * requests are proxied, against the same gateway that nobody revokes on — their p99 side by side.
 */

const SANDBOXES = 1000;
const PROXY_RATE = 1500;
const CONNECTIONS = 10;
const CHECK_RATE = 3000;
const CHECK_IN_FLIGHT = 64;
const OFF = ['--activity-ignore', '/*'];
const REVOKERS = 4;
const REVOKING_TEAM = 'revokers';

/** A key file with one key of the revoking team, a pepper and link keys, in `dir`: the flags that use them. */
function linkStore(ctx: BenchContext, dir: string, from?: string): { args: string[]; key: string } {
  mkdirSync(dir, { recursive: true });
  const pepper = join(dir, 'pepper');
  const keys = join(dir, 'keys.yaml');
  const links = join(dir, 'links.yaml');
  let key = '';
  if (from === undefined) {
    writeFileSync(pepper, 'bench-pepper-'.padEnd(40, 'x'));
    const { privateKey } = generateKeyPairSync('ed25519');
    writeFileSync(links, `keys:\n  - kid: bench\n    privateKey: |\n${privateKey.export({ type: 'pkcs8', format: 'pem' }).toString().trimEnd().replace(/^/gm, '      ')}\n`);
    key = (JSON.parse(execFileSync(process.execPath, [CLI, 'keys', 'create', '--team', REVOKING_TEAM, '--api-keys', keys, '--key-pepper-file', pepper], { encoding: 'utf8' })) as { key: string }).key;
  } else {
    for (const f of ['pepper', 'keys.yaml', 'links.yaml']) copyFileSync(join(from, f), join(dir, f));
  }
  ctx.log(`overheads: link store in ${dir}`);
  const args = ['--api-keys', keys, '--key-pepper-file', pepper, '--api-key-namespaces', REVOKING_TEAM, '--link-keys-file', links, '--link-revocations-per-namespace', '1000000'];
  return { args, key };
}

export const overheads: Section = {
  id: 'overheads',
  title: 'Overheads: tracing, the access log and activity tracking, per request',
  estimateSeconds: { quick: 70, full: 210 },
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
      const revokedOn = linkStore(ctx, join(ctx.tmp, 'revoked-on'));
      const revoked = await gateway({ name: 'sandgate-revoked-on', args: [...OFF, ...revokedOn.args] });
      const quiet = await gateway({ name: 'sandgate-not-revoked-on', args: [...OFF, ...linkStore(ctx, join(ctx.tmp, 'not-revoked-on'), join(ctx.tmp, 'revoked-on')).args] });
      const variants: [string, Target][] = [
        ['tracing, 100 % sampled', await gateway({ name: 'sandgate-traced-100', args: OFF, env: { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, OTEL_TRACES_SAMPLER: 'parentbased_always_on' } })],
        ['tracing, 1 % sampled', await gateway({ name: 'sandgate-traced-1', args: OFF, env: { OTEL_EXPORTER_OTLP_ENDPOINT: endpoint, OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.01' } })],
        ['access log to a file', await gateway({ name: 'sandgate-access-log', args: [...OFF, '--access-log', join(ctx.tmp, 'access.log')] })],
        ['activity tracking', activity],
      ];
      const http = (t: Target): HttpSide => ({ target: t, url: t.url('proxy') });
      await upstream.reachedBy([off, revoked, quiet, ...variants.map(([, t]) => t)].map(http));
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

      ctx.log(`overheads: proxied p99 at ${PROXY_RATE} req/s while another tenant revokes links (${REVOKERS} revokers) vs nobody revoking`);
      const revoker = ctx.procs.node('link-revoker', benchScript('lib/revoker.js'));
      await revoker.ready();
      await revoker.request('start', { url: `${revoked.adminUrl}/v1/links/`, key: revokedOn.key, namespace: REVOKING_TEAM, concurrency: REVOKERS });
      const during = await httpPair(requests, [http(revoked)], [http(quiet)])({ ...plan, rate: PROXY_RATE, inFlight: CONNECTIONS });
      const done = await revoker.request<{ revoked: number; refused: number; seconds: number }>('stop');
      const p = (m: { latency: { p99: number } }) => m.latency.p99;
      f.rows.push(row(`p99 proxied @ ${PROXY_RATE} req/s, another tenant revoking links`, 'µs', medianOf(during.a, p), medianOf(during.b, p), 'vs the same gateway, nobody revoking'));
      f.notes.push(`link revocations during the p99 blocks: ${done.revoked} stored (${(done.revoked / done.seconds).toFixed(0)}/s), ${done.refused} refused, by ${REVOKERS} concurrent revokers into the file store`);
      f.notes.push(...trialProblems({ a: 'revoked on', b: 'nobody revoking' }, during).map((x) => `p99 while revoking: ${x}`));
      return f.output('the same gateway with tracing, the access log and activity tracking off; for revocations, the same gateway nobody revokes on');
    } finally {
      await new Promise((r) => sink.close(r));
    }
  },
};

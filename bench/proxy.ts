import { splitCpus } from './lib/cpu-pin.js';
import { httpLoad, type HttpRequestSpec } from './lib/http-load.js';
import { alternate, alternateHttp, BLOCKS, compareCost, floorText, INSTANCES, noiseFloor, cpuPerRequest, idleNote, compareRate, costData, costNotes, costRows, costTarget, PAIRS, type CostComparison, type HttpSide, type RateComparison } from './lib/cost.js';
import { interleaved, warmUp, type Arm } from './lib/interleave.js';
import { loopbackHost, probe, proxyRequests, UPSTREAM_BODY, writeLoopbackSandboxesFile } from './lib/loopback-sandboxes.js';
import { measured, round2, runData, runProblems, SATURATED_CORES, type Measured } from './lib/measure.js';
import { findNginx, startNginx } from './lib/nginx.js';
import { CombinedTarget } from './lib/proc-cpu.js';
import { row, target, type Row, type TargetResult } from './lib/report.js';
import { timing, type BenchContext, type Section, type Timing } from './lib/section.js';
import { startBare, startGateway, type Target } from './lib/targets.js';

/**
 * 3. The embedded proxy, every request carried to a small upstream on loopback, beside the same load sent
 * straight to the upstream, through a plain undici forwarder (no routing: the floor of a Node proxy),
 * through nginx `proxy_pass`, and through nginx `auth_request` to sandgate's HTTP authz (sandgate without
 * Envoy, the nginx way). The load generator runs on one CPU and everything under test on the others
 * (cpu-pin.ts). The embedded proxy is judged against the forwarder on CPU per request of the proxy
 * process at a fixed offered rate, the two interleaved (cost.ts alternateHttp) over INSTANCES pairs of
 * processes, with req/s at the limit beside it, at 10 and at 64 connections, and the same cost trials
 * between further copies of the forwarder and the forwarders (the noise floor) beside the verdict; the
 * windows of all arms at their limit are interleaved (interleave.ts).
 */

const SANDBOXES = 1000;
const CONNECTIONS = [10, 64] as const;
const JUDGED_AT = 64;
/** Offered in the cost trials: proxy and upstream share one CPU, and each answers far more than this. */
const RATE = 1500;
const MAX_EXTRA_US = 5;
const MIN_VS_FORWARDER = 0.9;

type ArmId = 'direct' | 'sandgate' | 'forwarder' | 'nginxPass' | 'nginxAuth' | 'nginxAuthPooled';

const LABEL: Readonly<Record<ArmId, string>> = {
  direct: 'direct to upstream',
  sandgate: 'embedded proxy',
  forwarder: 'undici forwarder',
  nginxPass: 'nginx proxy_pass',
  nginxAuth: 'nginx auth_request → sandgate',
  nginxAuthPooled: 'nginx auth_request → sandgate, pooled upstream',
};

const PROXIES = ['sandgate', 'forwarder', 'nginxPass', 'nginxAuth', 'nginxAuthPooled'] as const;

interface ArmSpec {
  readonly url: string;
  /** Whose CPU the window samples: the proxy tier and the upstream (for direct, the upstream alone). */
  readonly cpu: Target;
}

type Arms = Partial<Record<ArmId, ArmSpec>>;

interface Started {
  readonly arms: Arms;
  /**
   * The proxy processes alone, whose CPU per request the cost trials compare, and where each listens:
   * INSTANCES of each, the first also the arms' (cost.ts INSTANCES says why).
   */
  readonly gws: readonly HttpSide[];
  readonly forwarders: readonly HttpSide[];
  /** Further copies of the forwarder, for the noise floor of the cost comparison. */
  readonly copies: readonly HttpSide[];
  readonly upstreamPort: number;
  /** Every process under test, to pin. */
  readonly pids: number[];
  readonly notes: string[];
}

/**
 * nginx's two arms, or why there are none. nginx asks a gateway of its own, so the embedded proxy's
 * gateway (its CPU, its profile) serves proxy traffic only.
 */
async function startNginxArms(ctx: BenchContext, upstream: Target, sandboxes: string, into: Started): Promise<void> {
  const found = await findNginx(ctx.log, ctx.installMissing);
  if ('skipped' in found) {
    into.notes.push(`nginx rows skipped: ${found.skipped}`);
    return;
  }
  const authz = await startGateway(ctx.procs, { name: 'sandgate-authz', sandboxes }, ctx.targetOptions);
  const nginx = await startNginx(ctx.procs, ctx.tmp, found.bin, { upstream: `127.0.0.1:${upstream.port('main')}`, adminPort: authz.port('admin'), authRequest: found.authRequest });
  into.pids.push(authz.pid, nginx.target.pid);
  into.arms.nginxPass = { url: `http://127.0.0.1:${nginx.ports.proxyPass}`, cpu: new CombinedTarget([nginx.target, upstream]) };
  if (found.authRequest) {
    const tier = new CombinedTarget([nginx.target, authz, upstream]);
    into.arms.nginxAuth = { url: `http://127.0.0.1:${nginx.ports.authRequest}`, cpu: tier };
    into.arms.nginxAuthPooled = { url: `http://127.0.0.1:${nginx.ports.authRequestPooled}`, cpu: tier };
  } else into.notes.push(`nginx auth_request rows skipped: ${found.bin} was built without http_auth_request_module`);
}

async function startArms(ctx: BenchContext): Promise<Started> {
  const upstream = await startBare(ctx.procs, 'upstream', 'lib/upstream-server.js', ctx.targetOptions);
  const upstreamPort = upstream.port('main');
  const upstreamAddress = `127.0.0.1:${upstreamPort}`;
  const sandboxes = writeLoopbackSandboxesFile(ctx.tmp, SANDBOXES);
  const instances = Array.from({ length: INSTANCES }, (_, i) => i + 1);
  const gws: HttpSide[] = [];
  const forwarders: HttpSide[] = [];
  const copies: HttpSide[] = [];
  for (const i of instances) {
    const gw = await startGateway(ctx.procs, { name: `sandgate-proxy-${i}`, sandboxes }, ctx.targetOptions);
    gws.push({ target: gw, url: `http://127.0.0.1:${gw.port('proxy')}` });
    const forwarder = await startBare(ctx.procs, `undici-forwarder-${i}`, 'lib/undici-forwarder.js', ctx.targetOptions, [upstreamAddress]);
    forwarders.push({ target: forwarder, url: `http://127.0.0.1:${forwarder.port('main')}` });
    const copy = await startBare(ctx.procs, `undici-forwarder-copy-${i}`, 'lib/undici-forwarder.js', ctx.targetOptions, [upstreamAddress]);
    copies.push({ target: copy, url: `http://127.0.0.1:${copy.port('main')}` });
  }
  const started: Started = {
    arms: {
      direct: { url: `http://${upstreamAddress}`, cpu: upstream },
      sandgate: { url: gws[0]!.url, cpu: new CombinedTarget([gws[0]!.target, upstream]) },
      forwarder: { url: forwarders[0]!.url, cpu: new CombinedTarget([forwarders[0]!.target, upstream]) },
    },
    gws,
    forwarders,
    copies,
    upstreamPort,
    pids: [upstream, ...[...gws, ...forwarders, ...copies].map((s) => s.target)].map((t) => t.pid),
    notes: [],
  };
  try {
    await startNginxArms(ctx, upstream, sandboxes, started);
  } catch (err) {
    delete started.arms.nginxPass;
    delete started.arms.nginxAuth;
    delete started.arms.nginxAuthPooled;
    started.notes.push(`nginx rows skipped: ${err instanceof Error ? err.message.split('\n')[0] : String(err)}`);
  }
  // Every arm must carry a request to the bench's upstream, and nowhere else, before any load.
  const host = loopbackHost(0, upstreamPort);
  for (const [id, s] of Object.entries(started.arms) as [ArmId, ArmSpec][]) {
    const r = await probe(s.url, host);
    if (r.status !== 200 || r.body !== UPSTREAM_BODY) throw new Error(`${LABEL[id]} (${s.url}) did not reach the bench upstream: ${r.status} ${r.body.slice(0, 200)}`);
  }
  for (const s of [...gws.slice(1), ...forwarders.slice(1), ...copies]) {
    const r = await probe(s.url, host);
    if (r.status !== 200 || r.body !== UPSTREAM_BODY) throw new Error(`${s.target.name} (${s.url}) did not reach the bench upstream: ${r.status} ${r.body.slice(0, 200)}`);
  }
  return started;
}


function compare(rows: Row[], label: string, c: number, a: Measured, b: Measured, vs: string): void {
  rows.push(row(`${label} req/s @ ${c} conn`, 'req/s', a.rps, b.rps, vs));
  rows.push(row(`${label} p50 @ ${c} conn`, 'µs', a.latency.p50, b.latency.p50, vs));
  rows.push(row(`${label} p99 @ ${c} conn`, 'µs', a.latency.p99, b.latency.p99, vs));
}

function nginxTarget(m: Partial<Record<ArmId, Measured>>, notes: readonly string[]): TargetResult {
  const vsNginx = m.nginxAuth === undefined ? undefined : m.sandgate!.rps / m.nginxAuth.rps;
  const skipped = notes.find((n) => n.startsWith('nginx')) ?? 'nginx auth_request was not measured';
  return target(`embedded proxy ahead of nginx auth_request → sandgate (req/s @ ${JUDGED_AT} conn)`, vsNginx === undefined ? undefined : vsNginx > 1, vsNginx === undefined ? skipped : `${vsNginx.toFixed(2)}×`);
}

function cpuNotes(m: Partial<Record<ArmId, Measured>>): string[] {
  const all = Object.entries(m) as [ArmId, Measured][];
  const upstreamPerRequest = cpuPerRequest(m.direct!);
  const out = [
    `CPU @ ${JUDGED_AT} conn of everything under test (the proxy tier and the upstream), cores, and µs per request (less the upstream's own ${upstreamPerRequest.toFixed(1)} µs): ` +
      all
        .filter(([id]) => id !== 'direct')
        .map(([id, r]) => `${LABEL[id]} ${round2(r.targetCpuCores)} (${(cpuPerRequest(r) - upstreamPerRequest).toFixed(1)})`)
        .join(', ') +
      '; the auth_request tiers are nginx + sandgate',
    `load generator CPU @ ${JUDGED_AT} conn, cores: ${all.map(([id, r]) => `${LABEL[id]} ${round2(r.loadCpuCores)}`).join(', ')}`,
  ];
  const direct = m.direct!;
  if (direct.loadCpuCores >= 0.85) {
    out.push(`direct to upstream was paced by the load generator (${round2(direct.loadCpuCores)} of its core): the upstream could answer more, so ratios vs direct overstate what the proxies keep`);
  }
  if (m.sandgate!.targetCpuCores < SATURATED_CORES && m.forwarder!.targetCpuCores < SATURATED_CORES) {
    out.push(`@ ${JUDGED_AT} conn the processes under test used under ${SATURATED_CORES} of a core in both the embedded proxy's and the forwarder's windows: the load generator or other work set the pace, and the ratio between them understates the difference`);
  }
  return out;
}

export const proxy: Section = {
  id: 'proxy',
  title: '3. Embedded proxy (vs direct, a plain undici forwarder and nginx)',
  async run(ctx) {
    const t = timing(ctx, { warmupMs: 300, durationMs: 1600 }, { warmupMs: 1000, durationMs: 6000 });
    // The full run's blocks and warm-up in --quick too. Two blocks of warm-up at the offered rate: a proxy's
    // first blocks after the warm-up at the limit read dearer than the rest (sandgate's +40 … +65 µs over the
    // forwarder where the later ones read +10 … +20). Blocks of 5 s: with 2 s blocks a --quick run's pairs
    // spread over 63 … 77 µs at 64 connections (full runs, 36), and its median moved past the bar.
    const tCost: Timing = { warmupMs: 10_000, durationMs: 5000 };
    const pairs = PAIRS;
    const started = await startArms(ctx);
    const notes = [...started.notes];
    const requests: readonly HttpRequestSpec[] = proxyRequests(SANDBOXES, started.upstreamPort);
    const armsAt = (connections: number): Record<ArmId, Arm> => {
      const arms = {} as Record<ArmId, Arm>;
      for (const [id, s] of Object.entries(started.arms) as [ArmId, ArmSpec][]) {
        arms[id] = (w: Timing) => measured(s.cpu, w, () => httpLoad({ url: s.url, connections, ...w, sandboxes: SANDBOXES, requests }));
      }
      return arms;
    };
    /** One proxy process's arm (sandgate, the forwarder or its copy), its CPU that of the process alone. */
    const proxyArm = (side: HttpSide, connections: number): Arm => (w: Timing) =>
      measured(side.target, w, () => httpLoad({ url: side.url, connections, ...w, sandboxes: SANDBOXES, requests }));

    const split = await splitCpus(started.pids);
    notes.push(typeof split === 'string' ? `CPUs ${split}` : `CPUs: load generator on ${split.load}, every process under test (proxies, upstream, nginx, sandgate) on ${split.underTest}`);
    const rows: Row[] = [];
    const data: Record<string, unknown> = { pinned: typeof split !== 'string' };
    let judged: Partial<Record<ArmId, Measured>> | undefined;
    const targets: TargetResult[] = [];
    try {
      ctx.log('proxy: warming every arm up');
      // The second instances and the forwarder's copies too: a process measured colder than the one it is
      // compared with reads dearer (an unwarmed copy's A/A floor read +12.5 µs @ 64 conn, every pair positive).
      const others = [...started.gws.slice(1), ...started.forwarders.slice(1), ...started.copies];
      await warmUp({ ...armsAt(JUDGED_AT), ...Object.fromEntries(others.map((s) => [s.target.name, proxyArm(s, JUDGED_AT)])) }, ctx.quick ? 1500 : 4000);
      notes.push(await idleNote('embedded proxy vs forwarder', RATE, { 'embedded proxy': started.gws[0]!.target, forwarder: started.forwarders[0]!.target }, ctx.quick ? 1000 : 3000));
      for (const c of CONNECTIONS) {
        ctx.log(`proxy: embedded proxy vs forwarder @ ${c} connections, CPU per request at ${RATE} req/s (${BLOCKS} interleaved pairs over ${INSTANCES} instance pairs) and req/s at the limit (${pairs} pairs)`);
        const cost: CostComparison = compareCost(RATE, await alternateHttp(tCost, RATE, c, requests, started.gws, started.forwarders), { a: 'embedded proxy', b: 'forwarder' });
        const floor = await noiseFloor(tCost, RATE, c, requests, started.copies, started.forwarders);
        notes.push(`embedded proxy vs forwarder @ ${c} conn: ${floorText(floor)}`);
        const rate: RateComparison = compareRate(await alternate(pairs, t, proxyArm(started.gws[0]!, c), proxyArm(started.forwarders[0]!, c)));
        rows.push(...costRows(`@ ${c} conn`, cost, rate, 'vs undici forwarder, the proxy process alone'));
        notes.push(...costNotes(`embedded proxy vs forwarder @ ${c} conn`, cost, rate));
        targets.push(costTarget(`embedded proxy vs the plain undici forwarder @ ${c} conn`, MAX_EXTRA_US, cost, { r: rate, min: MIN_VS_FORWARDER }, floor));
        data[`cost-c${c}`] = costData(cost, rate);
        data[`noise-floor-c${c}`] = costData(floor, undefined);
      }
      // Every arm at its limit: at both connection counts in a full run, at the judged one in --quick.
      for (const c of ctx.quick ? [JUDGED_AT] : CONNECTIONS) {
        ctx.log(`proxy: ${c} connections (${Object.keys(started.arms).join(', ')})`);
        const m: Partial<Record<ArmId, Measured>> = await interleaved(t, armsAt(c));
        for (const id of PROXIES) {
          const a = m[id];
          if (a !== undefined) compare(rows, LABEL[id], c, a, m.direct!, 'vs direct');
        }
        if (m.nginxAuth !== undefined) compare(rows, LABEL.sandgate, c, m.sandgate!, m.nginxAuth, 'vs nginx auth_request');
        if (m.nginxAuthPooled !== undefined) compare(rows, LABEL.sandgate, c, m.sandgate!, m.nginxAuthPooled, 'vs nginx auth_request, pooled upstream');
        for (const [id, r] of Object.entries(m) as [ArmId, Measured][]) notes.push(...runProblems(`${LABEL[id]} @ ${c}`, r));
        data[`c${c}`] = Object.fromEntries(Object.entries(m).map(([id, r]) => [id, { ...runData(r), cpuUsPerRequest: round2(cpuPerRequest(r)) }]));
        if (c === JUDGED_AT) judged = m;
      }
    } finally {
      if (typeof split !== 'string') await split.restore();
    }
    if (judged !== undefined) {
      targets.push(nginxTarget(judged, notes));
      notes.push(...cpuNotes(judged));
    }
    return { baseline: 'direct to upstream, or as the row says', rows, targets, notes, data };
  },
};

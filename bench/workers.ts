import { cpus } from 'node:os';
import { GrpcLoad, type LoadResult } from './lib/grpc-load.js';
import { httpLoad } from './lib/http-load.js';
import { proxyRequests, writeLoopbackSandboxesFile } from './lib/loopback-sandboxes.js';
import { abba, measured, round2, runData, runProblems, SATURATED_CORES, saturationNote, type Measured, type Pair } from './lib/measure.js';
import { descendantCount, ProcessTreeTarget } from './lib/proc-cpu.js';
import { row, target, type Row, type TargetResult } from './lib/report.js';
import { timing, type Section, type Timing } from './lib/section.js';
import { startBare, startGateway, type Target } from './lib/targets.js';
import { waitForWorkers } from './lib/workers-ready.js';

/**
 * 7. Both cores: the gateway with `--workers 2` (node:cluster, every listener shared, each worker a full
 * gateway) against one process, under the same load in the same run: the HTTP authz door and the embedded
 * proxy (to a small upstream) from autocannon in the runner, outside both gateways, and ext_authz Check
 * from gRPC load processes. CPU is read from /proc for the whole process tree, primary and workers.
 *
 * Target: ≥ 1.6× one process's req/s for HTTP authz and the proxy. Whether a machine can show that at all
 * follows from CPU per request: one process answers at most min(1 core ÷ its cost, the other cores ÷ what
 * the load generator and upstream spend per request), two workers at most min(2 cores ÷ the gateway's
 * cost, all cores ÷ everyone's). Their quotient is the ceiling printed; where it is under 1.6 the target
 * is reported as not measurable here, with the figures, instead of FAIL.
 */

const SANDBOXES = 1000;
const WORKERS = 2;
const CONNECTIONS = 64;
const IN_FLIGHT = 64;
const MIN_RATIO = 1.6;

interface Door {
  readonly what: string;
  readonly pair: Pair;
  /** CPU µs per request of what shares the machine besides the gateway (load generator, upstream), each window. */
  readonly otherUs: { readonly g: number; readonly b: number };
}

function pairRows(rows: Row[], what: string, p: Pair): void {
  rows.push(row(`${what} req/s`, 'req/s', p.g.rps, p.b.rps));
  rows.push(row(`${what} p50`, 'µs', p.g.latency.p50, p.b.latency.p50));
  rows.push(row(`${what} p99`, 'µs', p.g.latency.p99, p.b.latency.p99));
}

function cpuNote(what: string, p: Pair): string {
  return `${what}, CPU in cores: ${WORKERS} workers ${round2(p.g.targetCpuCores)}, one process ${round2(p.b.targetCpuCores)}; load generator ${round2(p.g.loadCpuCores)} / ${round2(p.b.loadCpuCores)}`;
}

/** Says what set the pace of the workers' window: the load generator's own processes, or the whole machine. */
function paceNote(what: string, p: Pair, loadProcesses: number): string | undefined {
  if (p.g.loadCpuCores >= SATURATED_CORES * loadProcesses) {
    return `${what}: the load generator used ${round2(p.g.loadCpuCores)} cores in ${loadProcesses} process(es), about all it can: it, not the gateway, set the pace of the workers' windows, so this ratio says little about what a second worker adds`;
  }
  const used = p.g.loadCpuCores + p.g.targetCpuCores;
  const cores = cpus().length;
  if (used >= SATURATED_CORES * cores) return `${what}: gateway and load generator together used ${round2(used)} of the machine's ${cores} cores in the workers' windows`;
  return undefined;
}

const perRequest = (cores: number, m: Measured): number => (m.rps > 0 ? (cores * 1e6) / m.rps : Number.NaN);

/** The best workers ÷ one-process ratio this machine allows, from CPU per request (see the module comment). */
export function ceiling(cores: number, gatewayUs: number, otherUs: number): number {
  const one = Math.min(1e6 / gatewayUs, ((cores - 1) * 1e6) / otherUs);
  const many = Math.min((WORKERS * 1e6) / gatewayUs, (cores * 1e6) / (gatewayUs + otherUs));
  return many / one;
}

function verdict(d: Door): TargetResult {
  const cores = cpus().length;
  const ratio = d.pair.g.rps / d.pair.b.rps;
  const gatewayUs = perRequest(d.pair.b.targetCpuCores, d.pair.b);
  const otherUs = d.otherUs.b;
  const limit = ceiling(cores, gatewayUs, otherUs);
  const figures =
    `${ratio.toFixed(2)}×; CPU per request: gateway ${gatewayUs.toFixed(1)} µs (one process) / ${perRequest(d.pair.g.targetCpuCores, d.pair.g).toFixed(1)} µs (${WORKERS} workers), ` +
    `load generator${d.what.includes('proxy') ? ' and upstream' : ''} ${otherUs.toFixed(1)} µs; ceiling on ${cores} cores ${limit.toFixed(2)}×`;
  const name = `--workers ${WORKERS} ≥ ${MIN_RATIO}× one process (${d.what})`;
  if (ratio >= MIN_RATIO) return target(name, true, figures);
  if (limit < MIN_RATIO) return target(name, undefined, `this machine cannot show it: ${figures}`);
  return target(name, false, figures);
}

export const workers: Section = {
  id: 'workers',
  title: `7. Both cores (--workers ${WORKERS} vs one process)`,
  async run(ctx) {
    const t = timing(ctx, { warmupMs: 300, durationMs: 1600 }, { warmupMs: 1000, durationMs: 6000 });
    const upstream = await startBare(ctx.procs, 'upstream', 'lib/upstream-server.js');
    const upstreamPort = upstream.port('main');
    // Sandboxes at 127.0.0.1 on the upstream's port: the proxy reaches the upstream, HTTP authz only decides.
    const file = writeLoopbackSandboxesFile(ctx.tmp, SANDBOXES);
    const one = ProcessTreeTarget.of(await startGateway(ctx.procs, { name: 'sandgate-1-process', sandboxes: file }, ctx.targetOptions));
    // No --cpu-prof here: the workers inherit the primary's flags and would all write one profile file.
    const many = ProcessTreeTarget.of(await startGateway(ctx.procs, { name: `sandgate-${WORKERS}-workers`, sandboxes: file, args: ['--workers', String(WORKERS)] }));
    await waitForWorkers(many, WORKERS);
    const rows: Row[] = [];
    const notes: string[] = [];
    const targets: TargetResult[] = [];
    const prime = ctx.quick ? 1000 : 3000;
    const doors: Door[] = [];

    /** An HTTP door: the pair, and what the load generator (and the upstream, for the proxy) spent per request. */
    const httpDoor = async (what: string, url: (tgt: Target) => string, withUpstream: boolean, requests?: ReturnType<typeof proxyRequests>): Promise<Door> => {
      ctx.log(`workers: ${what}`);
      const upstreamUs = new Map<Target, number[]>();
      const at = async (tgt: Target, w: Timing): Promise<LoadResult> => {
        const u0 = withUpstream ? await upstream.cpuMicros() : 0;
        const r = await httpLoad({ url: url(tgt), connections: CONNECTIONS, ...w, sandboxes: SANDBOXES, requests });
        if (withUpstream && r.completed > 0) {
          // The upstream's CPU over the whole run (warm-up included) per request answered in the whole run.
          const total = r.completed * ((w.warmupMs + w.durationMs) / w.durationMs);
          upstreamUs.set(tgt, [...(upstreamUs.get(tgt) ?? []), ((await upstream.cpuMicros()) - u0) / total]);
        }
        return r;
      };
      // Unrecorded first: every worker's JIT warm before the windows (a fresh worker's first second is slow).
      for (const tgt of [one, many]) await at(tgt, { warmupMs: 0, durationMs: prime });
      upstreamUs.clear();
      const pair = await abba(t, (w) => measured(many, w, () => at(many, w)), (w) => measured(one, w, () => at(one, w)));
      const mean = (xs: number[] | undefined): number => (xs === undefined || xs.length === 0 ? 0 : xs.reduce((a, b) => a + b, 0) / xs.length);
      const otherUs = { g: perRequest(pair.g.loadCpuCores, pair.g) + mean(upstreamUs.get(many)), b: perRequest(pair.b.loadCpuCores, pair.b) + mean(upstreamUs.get(one)) };
      pairRows(rows, what, pair);
      return { what, pair, otherUs };
    };
    doors.push(await httpDoor(`HTTP authz @ ${CONNECTIONS} conn`, (tgt) => tgt.adminUrl, false));
    doors.push(await httpDoor(`embedded proxy @ ${CONNECTIONS} conn`, (tgt) => 'http://127.0.0.1:' + tgt.port('proxy'), true, proxyRequests(SANDBOXES, upstreamPort)));
    for (const d of doors) targets.push(verdict(d));

    // node:cluster balances connections, not requests: each load process holds one HTTP/2 connection, so
    // at least as many processes as workers are needed for every worker to get a share.
    const loadProcesses = Math.max(WORKERS, ctx.loadProcesses);
    const checkWhat = `Check @ ${IN_FLIGHT} in flight`;
    ctx.log(`workers: ext_authz Check @ ${IN_FLIGHT} in flight from ${loadProcesses} load processes`);
    const load = await GrpcLoad.start(ctx.procs, loadProcesses, ctx.grpcClient);
    const checkAt = (tgt: Target, w: Timing): Promise<LoadResult> => load.run({ target: tgt.grpcTarget, kind: 'check', inFlight: IN_FLIGHT, ...w, sandboxes: SANDBOXES });
    for (const tgt of [one, many]) await checkAt(tgt, { warmupMs: 0, durationMs: prime });
    const check = await abba(t, (w) => measured(many, w, () => checkAt(many, w)), (w) => measured(one, w, () => checkAt(one, w)));
    pairRows(rows, checkWhat, check);

    const running = descendantCount(many.child.proc.pid!);
    if (running !== WORKERS) notes.push(`${running} worker processes were running after the windows, not ${WORKERS}: a worker died and was replaced during the run`);
    for (const { what, pair, processes } of [...doors.map((d) => ({ what: d.what, pair: d.pair, processes: 1 })), { what: checkWhat, pair: check, processes: loadProcesses }]) {
      notes.push(...runProblems(`${WORKERS} workers, ${what}`, pair.g), ...runProblems(`one process, ${what}`, pair.b));
      notes.push(cpuNote(what, pair));
      const warn = saturationNote(what, pair) ?? paceNote(what, pair, processes);
      if (warn !== undefined) notes.push(warn);
    }
    notes.push(
      `the machine's cores are shared by the gateway's workers, the load generators (autocannon in the runner, ${loadProcesses} gRPC load processes) and, for the proxy, the upstream: ` +
        `a second worker can only use what they leave; the ceiling on each target line is what CPU per request allows on this machine`,
    );
    const data = {
      http: { workers: runData(doors[0]!.pair.g), one: runData(doors[0]!.pair.b), otherUs: doors[0]!.otherUs },
      proxy: { workers: runData(doors[1]!.pair.g), one: runData(doors[1]!.pair.b), otherUs: doors[1]!.otherUs },
      check: { workers: runData(check.g), one: runData(check.b), loadProcesses },
    };
    return { baseline: 'one process', rows, targets, notes, data };
  },
};

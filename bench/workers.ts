import { cpus } from 'node:os';
import { GrpcLoad, type LoadResult } from './lib/grpc-load.js';
import { httpLoad } from './lib/http-load.js';
import { paired, round2, runData, runProblems, SATURATED_CORES, saturationNote, type Pair } from './lib/measure.js';
import { descendantCount, ProcessTreeTarget } from './lib/proc-cpu.js';
import { row, type Row } from './lib/report.js';
import { writeSandboxesFile } from './lib/sandboxes.js';
import { timing, type Section, type Timing } from './lib/section.js';
import { startGateway, type Target } from './lib/targets.js';
import { waitForWorkers } from './lib/workers-ready.js';

/**
 * 7. Both cores: the gateway with `--workers 2` (node:cluster, every listener shared, each worker a full
 * gateway) against one process, under the same HTTP authz and ext_authz Check load, in the same run.
 * CPU is read from /proc for the whole process tree, primary and workers.
 */

const SANDBOXES = 1000;
const WORKERS = 2;
const CONNECTIONS = 64;
const IN_FLIGHT = 64;

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

export const workers: Section = {
  id: 'workers',
  title: `7. Both cores (--workers ${WORKERS} vs one process)`,
  async run(ctx) {
    const t = timing(ctx, { warmupMs: 300, durationMs: 1600 }, { warmupMs: 1000, durationMs: 6000 });
    const file = writeSandboxesFile(ctx.tmp, SANDBOXES, 'none');
    const one = ProcessTreeTarget.of(await startGateway(ctx.procs, { name: 'sandgate-1-process', sandboxes: file }, ctx.targetOptions));
    // No --cpu-prof here: the workers inherit the primary's flags and would all write one profile file.
    const many = ProcessTreeTarget.of(await startGateway(ctx.procs, { name: `sandgate-${WORKERS}-workers`, sandboxes: file, args: ['--workers', String(WORKERS)] }));
    await waitForWorkers(many, WORKERS);
    const rows: Row[] = [];
    const notes: string[] = [];

    const prime = ctx.quick ? 1000 : 3000;
    const httpWhat = `HTTP authz @ ${CONNECTIONS} conn`;
    const checkWhat = `Check @ ${IN_FLIGHT} in flight`;
    const httpAt = (tgt: Target, w: Timing): Promise<LoadResult> => httpLoad({ url: tgt.adminUrl, connections: CONNECTIONS, ...w, sandboxes: SANDBOXES });
    ctx.log(`workers: HTTP authz @ ${CONNECTIONS} connections`);
    // Unrecorded first: every worker's JIT warm before the windows (a fresh worker's first second is slow).
    for (const tgt of [one, many]) await httpAt(tgt, { warmupMs: 0, durationMs: prime });
    const http = await paired(many, one, t, httpAt);
    pairRows(rows, httpWhat, http);

    // node:cluster balances connections, not requests: each load process holds one HTTP/2 connection, so
    // at least as many processes as workers are needed for every worker to get a share.
    const loadProcesses = Math.max(WORKERS, ctx.loadProcesses);
    ctx.log(`workers: ext_authz Check @ ${IN_FLIGHT} in flight from ${loadProcesses} load processes`);
    const load = await GrpcLoad.start(ctx.procs, loadProcesses, ctx.grpcClient);
    const checkAt = (tgt: Target, w: Timing): Promise<LoadResult> => load.run({ target: tgt.grpcTarget, kind: 'check', inFlight: IN_FLIGHT, ...w, sandboxes: SANDBOXES });
    for (const tgt of [one, many]) await checkAt(tgt, { warmupMs: 0, durationMs: prime });
    const check = await paired(many, one, t, checkAt);
    pairRows(rows, checkWhat, check);

    const running = descendantCount(many.child.proc.pid!);
    if (running !== WORKERS) notes.push(`${running} worker processes were running after the windows, not ${WORKERS}: a worker died and was replaced during the run`);
    for (const [what, p] of [[httpWhat, http], [checkWhat, check]] as const) {
      notes.push(...runProblems(`${WORKERS} workers, ${what}`, p.g), ...runProblems(`one process, ${what}`, p.b));
      notes.push(cpuNote(what, p));
      const warn = saturationNote(what, p) ?? paceNote(what, p, what === httpWhat ? 1 : loadProcesses);
      if (warn !== undefined) notes.push(warn);
    }
    notes.push(
      `the machine's cores are shared by the gateway's workers and the load generators (autocannon in the runner, ${loadProcesses} gRPC load processes): ` +
        `a second worker can only use what the load leaves, so on a 2-core machine the ratio stays well under ${WORKERS}×`,
    );
    const data = { http: { workers: runData(http.g), one: runData(http.b) }, check: { workers: runData(check.g), one: runData(check.b), loadProcesses } };
    return { baseline: 'one process', rows, targets: [], notes, data };
  },
};

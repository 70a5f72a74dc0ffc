import { get } from 'node:http';
import { cpus } from 'node:os';
import { Findings, round2 } from './lib/compare.js';
import { GrpcLoad, type LoadResult } from './lib/grpc-load.js';
import { descendantCount, ProcessTreeTarget } from './lib/proc-cpu.js';
import { sleep } from './lib/processes.js';
import { row, target } from './lib/report.js';
import { writeSandboxesFile } from './lib/sandboxes.js';
import { type Section } from './lib/section.js';
import { startGateway, type Target } from './lib/targets.js';

/**
 * N load processes, one HTTP/2 connection each, so node:cluster (which balances connections, not
 * requests) gives every worker one. A load process costs about what a worker does per Check, so N
 * workers are measured only where the machine has 2N cores; elsewhere the row is SKIP, never a FAIL.
 */

const SANDBOXES = 1000;
const IN_FLIGHT_PER_WORKER = 64;
const MIN_EFFICIENCY = 0.8;

/** The status of /readyz over a new connection (agent: false), which the primary hands to a worker of its choosing. */
function readyz(url: string): Promise<number | undefined> {
  return new Promise((resolve) => {
    const req = get(url, { agent: false, timeout: 2_000 }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(undefined));
  });
}

/**
 * `--workers N` answers /readyz 200 once its first worker is ready, and the primary hands new connections
 * round-robin to the workers listening: before load, wait until N workers run and 4N fresh connections
 * in a row (so every worker gets some) answer 200.
 */
async function waitForWorkers(gw: Target, workers: number, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (let streak = 0; streak < workers * 4; ) {
    if (Date.now() > deadline) throw new Error(`${gw.name}: ${workers} workers were not all ready within ${timeoutMs} ms (${descendantCount(gw.pid)} running)`);
    if (!gw.child.running) throw new Error(`${gw.name} exited:\n${gw.child.tailText()}`);
    const ok = descendantCount(gw.pid) >= workers && (await readyz(gw.adminUrl + '/readyz')) === 200;
    streak = ok ? streak + 1 : 0;
    if (!ok) await sleep(50);
  }
}

export const workers: Section = {
  id: 'workers',
  title: 'Workers (--workers N vs one process)',
  estimateSeconds: { quick: 10, full: 40 },
  async run(ctx) {
    const cores = cpus().length;
    const window = ctx.quick ? { warmupMs: 1000, durationMs: 3000 } : { warmupMs: 3000, durationMs: 10_000 };
    const file = writeSandboxesFile(ctx.tmp, SANDBOXES, 'none');
    const f = new Findings();
    let one: LoadResult | undefined;
    for (const n of [1, ...ctx.workersList.filter((w) => w !== 1)]) {
      const name = `--workers ${n} scales Check req/s with efficiency ≥ ${MIN_EFFICIENCY}`;
      if (n > 1 && cores < 2 * n) {
        f.targets.push(target(name, undefined, `needs ${2 * n} cores (${n} workers and ${n} load processes), this machine has ${cores}`));
        continue;
      }
      ctx.log(`workers: ${n} worker(s), Check at the limit from ${n} load process(es)`);
      const started = await startGateway(ctx.procs, { name: `sandgate-${n}-workers`, sandboxes: file, args: n === 1 ? [] : ['--workers', String(n)] });
      const gw = ProcessTreeTarget.of(started);
      if (n > 1) await waitForWorkers(gw, n);
      const load = await GrpcLoad.start(ctx.procs, n);
      const run = { target: gw.grpcTarget, kind: 'check' as const, inFlight: IN_FLIGHT_PER_WORKER * n, sandboxes: SANDBOXES };
      await load.run({ ...run, warmupMs: 0, durationMs: window.warmupMs });
      const cpu0 = gw.cpuMicrosNow();
      const r = await load.run({ ...run, warmupMs: 0, durationMs: window.durationMs });
      const gatewayCores = (gw.cpuMicrosNow() - cpu0) / 1000 / window.durationMs;
      await load.stop();
      await gw.stop();
      one ??= r;
      const efficiency = r.rps / (n * one.rps);
      f.rows.push(row(`Check req/s @ ${IN_FLIGHT_PER_WORKER} in flight per worker, ${n} worker(s)`, 'req/s', r.rps, n * one.rps, `vs ${n} × one process`));
      f.notes.push(`${n} worker(s): gateway ${round2(gatewayCores)} cores, load generators ${round2(r.loadCpuCores)} cores; p99 ${Math.round(r.latency.p99)} µs${r.errors > 0 ? `; ${r.errors} errors (${r.firstError ?? ''})` : ''}`);
      if (n > 1) f.targets.push(target(name, efficiency >= MIN_EFFICIENCY, `efficiency ${efficiency.toFixed(2)} (${Math.round(r.rps)} vs ${n} × ${Math.round(one.rps)} req/s)`));
    }
    return f.output('N × one process');
  },
};

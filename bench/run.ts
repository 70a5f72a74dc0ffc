import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { churn } from './churn.js';
import { consoleBench } from './console.js';
import { envoyGrpc } from './envoy-grpc.js';
import { httpAuthz } from './http-authz.js';
import { machineFacts, ROOT } from './lib/machine.js';
import { ProcessGroup } from './lib/processes.js';
import { agreementLines, runMarkdown, sectionMarkdown, skippedLines, targetLines, type RunResult, type SectionResult } from './lib/report.js';
import type { BenchContext, Section } from './lib/section.js';
import type { GrpcClientKind } from './lib/grpc-load-worker.js';
import { presenceShards } from './presence-shards.js';
import { proxy } from './proxy.js';
import { redisHa } from './redis-ha.js';
import { scale } from './scale.js';
import { sessions } from './sessions.js';
import { snapshotMemory } from './snapshot-memory.js';
import { workers } from './workers.js';

/**
 * `npm run bench [-- --quick] [-- --only id,id] [-- --cpu-prof] [-- --cpu-prof-windows] [-- --load-procs N] [-- --install-missing]`:
 * runs every section in order, each against servers in their own processes on loopback, prints the tables,
 * the PASS/FAIL lines and what was skipped. A full run of every section is the canonical one: it replaces
 * bench/results/latest.json (and every older result there) and regenerates BENCHMARKS.md. A --quick or
 * --only run is kept in bench/results/runs/ (not committed) and compared with latest.json.
 *
 * A section is one module exporting a Section; adding one is that module plus one line below.
 */

const SECTIONS: readonly Section[] = [
  httpAuthz,
  envoyGrpc,
  proxy,
  scale,
  churn,
  sessions,
  workers,
  redisHa,
  consoleBench,
  snapshotMemory,
  presenceShards,
];

interface Args {
  readonly quick: boolean;
  readonly only: readonly string[] | undefined;
  readonly cpuProf: boolean;
  /** Profile only the measured windows of each process (heap-probe.ts), one file per window. */
  readonly cpuProfWindows: boolean;
  readonly loadProcesses: number;
  readonly grpcClient: GrpcClientKind;
  readonly installMissing: boolean;
}

const USAGE = `usage: npm run bench -- [--quick] [--only ${SECTIONS.map((s) => s.id).join(',')}] [--cpu-prof] [--cpu-prof-windows] [--load-procs N] [--grpc-client grpc-js|h2] [--install-missing]`;

/** The canonical result, written only by a full run of every section. */
const LATEST = 'latest.json';

function parseArgs(argv: readonly string[]): Args {
  let quick = false;
  let only: string[] | undefined;
  let cpuProf = false;
  let cpuProfWindows = false;
  let loadProcesses = 1;
  let grpcClient: GrpcClientKind = 'h2';
  let installMissing = false;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--quick') quick = true;
    else if (a === '--cpu-prof') cpuProf = true;
    else if (a === '--cpu-prof-windows') cpuProfWindows = true;
    else if (a === '--install-missing') installMissing = true;
    else if (a === '--only' && argv[i + 1] !== undefined) only = argv[++i]!.split(',');
    else if (a === '--load-procs' && /^[1-8]$/.test(argv[i + 1] ?? '')) loadProcesses = Number(argv[++i]);
    else if (a === '--grpc-client' && (argv[i + 1] === 'grpc-js' || argv[i + 1] === 'h2')) grpcClient = argv[++i] as GrpcClientKind;
    else if (a === '--help' || a === '-h') {
      console.log(USAGE);
      process.exit(0);
    } else {
      console.error(`bench: unknown argument ${a}\n${USAGE}`);
      process.exit(2);
    }
  }
  const unknown = only?.filter((id) => !SECTIONS.some((s) => s.id === id)) ?? [];
  if (unknown.length > 0) {
    console.error(`bench: unknown section ${unknown.join(', ')}\n${USAGE}`);
    process.exit(2);
  }
  return { quick, only, cpuProf, cpuProfWindows, loadProcesses, grpcClient, installMissing };
}

function stamp(d: Date): string {
  return d.toISOString().replace(/:/g, '-').replace(/\.\d+Z$/, 'Z');
}

async function runSection(s: Section, base: Omit<BenchContext, 'procs'>): Promise<SectionResult> {
  const procs = new ProcessGroup();
  const t0 = performance.now();
  base.log(`${s.title}: starting`);
  try {
    const out = await s.run({ ...base, procs });
    return { id: s.id, title: s.title, seconds: (performance.now() - t0) / 1000, ...out };
  } catch (err) {
    const message = err instanceof Error ? (err.stack ?? err.message) : String(err);
    base.log(`${s.title}: failed: ${message}`);
    return { id: s.id, title: s.title, seconds: (performance.now() - t0) / 1000, baseline: '', rows: [], targets: [], notes: [], error: message };
  } finally {
    await procs.stopAll();
  }
}

async function main(): Promise<number> {
  const args = parseArgs(process.argv.slice(2));
  const started = new Date();
  const t0 = performance.now();
  const machine = machineFacts(started);
  const resultsDir = join(ROOT, 'bench', 'results');
  const profiles = join(resultsDir, `profiles-${stamp(started)}`);
  const profileDir = args.cpuProf ? profiles : undefined;
  const windowProfileDir = args.cpuProfWindows ? join(profiles, 'windows') : undefined;
  for (const d of [profileDir, windowProfileDir]) if (d !== undefined) mkdirSync(d, { recursive: true });
  const tmp = mkdtempSync(join(tmpdir(), 'sandgate-bench-'));
  const log = (m: string): void => console.error(`[bench ${((performance.now() - t0) / 1000).toFixed(1).padStart(6)} s] ${m}`);
  log(`${args.quick ? 'quick' : 'full'} run on ${machine.cpuModel} × ${machine.cores}, Node ${machine.node}`);
  const sections: SectionResult[] = [];
  try {
    for (const s of SECTIONS) {
      if (args.only !== undefined && !args.only.includes(s.id)) continue;
      const r = await runSection(s, { quick: args.quick, tmp, targetOptions: { profileDir, windowProfileDir }, loadProcesses: args.loadProcesses, grpcClient: args.grpcClient, installMissing: args.installMissing, log });
      sections.push(r);
      process.stdout.write(sectionMarkdown(r) + '\n');
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  const result: RunResult = { mode: args.quick ? 'quick' : 'full', machine, seconds: (performance.now() - t0) / 1000, sections };
  // A profiled run measures the profiler too: it is never the canonical one.
  const canonical = !args.quick && args.only === undefined && !args.cpuProf && !args.cpuProfWindows && sections.every((s) => s.error === undefined);
  const latestPath = join(resultsDir, LATEST);
  const latest = !canonical && existsSync(latestPath) ? (JSON.parse(readFileSync(latestPath, 'utf8')) as RunResult) : undefined;
  let jsonPath: string;
  if (canonical) {
    // Superseded results go: the folder holds the one run BENCHMARKS.md was made from.
    mkdirSync(resultsDir, { recursive: true });
    for (const f of readdirSync(resultsDir)) if (f.endsWith('.json')) rmSync(join(resultsDir, f));
    jsonPath = latestPath;
    writeFileSync(jsonPath, JSON.stringify(result, null, 2) + '\n');
    writeFileSync(join(ROOT, 'BENCHMARKS.md'), runMarkdown(result));
  } else {
    mkdirSync(join(resultsDir, 'runs'), { recursive: true });
    jsonPath = join(resultsDir, 'runs', `${stamp(started)}-${result.mode}.json`);
    writeFileSync(jsonPath, JSON.stringify(result, null, 2) + '\n');
  }
  const out = ['### Targets', '', ...targetLines(sections), ''];
  const skipped = skippedLines(sections);
  if (skipped.length > 0) out.push('### Skipped', '', ...skipped, '');
  if (latest !== undefined) out.push(`### Against the canonical ${latest.mode} run of ${latest.machine.date} (${LATEST})`, '', ...agreementLines(sections, latest.sections), '');
  process.stdout.write(out.join('\n') + '\n');
  log(
    canonical
      ? `results: ${jsonPath}, BENCHMARKS.md`
      : `results: ${jsonPath} (not committed; only a full run of every section without errors replaces ${LATEST} and BENCHMARKS.md)`,
  );
  if (profileDir !== undefined || windowProfileDir !== undefined) log(`CPU profiles: ${profiles} (open in Chrome DevTools, or: node dist/bench/lib/profile-summary.js FILE)`);
  return sections.some((s) => s.error !== undefined) ? 1 : 0;
}

// Exit even if a client somewhere (a load generator's channel, a Redis client) still holds a handle: the
// run is over and every child has been stopped.
process.exit(await main());

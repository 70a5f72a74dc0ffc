import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { churn } from './churn.js';
import { envoyGrpc } from './envoy-grpc.js';
import { httpAuthz } from './http-authz.js';
import { machineFacts, ROOT } from './lib/machine.js';
import { ProcessGroup } from './lib/processes.js';
import { runMarkdown, sectionMarkdown, targetLines, type RunResult, type SectionResult } from './lib/report.js';
import type { BenchContext, Section } from './lib/section.js';
import type { GrpcClientKind } from './lib/grpc-load-worker.js';
import { proxy } from './proxy.js';
import { redisHa } from './redis-ha.js';
import { scale } from './scale.js';
import { sessions } from './sessions.js';
import { workers } from './workers.js';

/**
 * `npm run bench [-- --quick] [-- --only id,id] [-- --cpu-prof] [-- --load-procs N]`: runs every section in
 * order, each against servers in their own processes on loopback, then writes bench/results/<date>.json,
 * prints the tables and the PASS/FAIL lines, and (when every section ran) regenerates BENCHMARKS.md.
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
];

interface Args {
  readonly quick: boolean;
  readonly only: readonly string[] | undefined;
  readonly cpuProf: boolean;
  readonly loadProcesses: number;
  readonly grpcClient: GrpcClientKind;
}

const USAGE = `usage: npm run bench -- [--quick] [--only ${SECTIONS.map((s) => s.id).join(',')}] [--cpu-prof] [--load-procs N] [--grpc-client grpc-js|h2]`;

function parseArgs(argv: readonly string[]): Args {
  let quick = false;
  let only: string[] | undefined;
  let cpuProf = false;
  let loadProcesses = 1;
  let grpcClient: GrpcClientKind = 'h2';
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--quick') quick = true;
    else if (a === '--cpu-prof') cpuProf = true;
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
  return { quick, only, cpuProf, loadProcesses, grpcClient };
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
  const profileDir = args.cpuProf ? join(resultsDir, `profiles-${stamp(started)}`) : undefined;
  if (profileDir !== undefined) mkdirSync(profileDir, { recursive: true });
  const tmp = mkdtempSync(join(tmpdir(), 'sandgate-bench-'));
  const log = (m: string): void => console.error(`[bench ${((performance.now() - t0) / 1000).toFixed(1).padStart(6)} s] ${m}`);
  log(`${args.quick ? 'quick' : 'full'} run on ${machine.cpuModel} × ${machine.cores}, Node ${machine.node}`);
  const sections: SectionResult[] = [];
  try {
    for (const s of SECTIONS) {
      if (args.only !== undefined && !args.only.includes(s.id)) continue;
      const r = await runSection(s, { quick: args.quick, tmp, targetOptions: { profileDir }, loadProcesses: args.loadProcesses, grpcClient: args.grpcClient, log });
      sections.push(r);
      process.stdout.write(sectionMarkdown(r) + '\n');
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  const result: RunResult = { mode: args.quick ? 'quick' : 'full', machine, seconds: (performance.now() - t0) / 1000, sections };
  mkdirSync(resultsDir, { recursive: true });
  const jsonPath = join(resultsDir, `${stamp(started)}.json`);
  writeFileSync(jsonPath, JSON.stringify(result, null, 2) + '\n');
  const markdown = runMarkdown(result);
  if (args.only === undefined) writeFileSync(join(ROOT, 'BENCHMARKS.md'), markdown);
  process.stdout.write(['### Targets', '', ...targetLines(sections), ''].join('\n') + '\n');
  log(`results: ${jsonPath}${args.only === undefined ? ', BENCHMARKS.md' : ' (BENCHMARKS.md is only rewritten by a run of every section)'}`);
  if (profileDir !== undefined) log(`CPU profiles: ${profileDir} (open in Chrome DevTools, or: node dist/bench/lib/profile-summary.js FILE)`);
  return sections.some((s) => s.error !== undefined) ? 1 : 0;
}

// Exit even if a client somewhere (a load generator's channel, a Redis client) still holds a handle: the
// run is over and every child has been stopped.
process.exit(await main());

import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { parseArgs } from 'node:util';
import { dirname, join } from 'node:path';
import { churn } from './churn.js';
import { doors } from './doors.js';
import { machineFacts, ROOT } from './lib/machine.js';
import { ProcessGroup } from './lib/processes.js';
import { runMarkdown, sectionMarkdown, skippedLines, targetLines, type RunResult, type SectionResult } from './lib/report.js';
import type { BenchContext, Section } from './lib/section.js';
import { overheads } from './overheads.js';
import { proxy } from './proxy.js';
import { redisHa } from './redis-ha.js';
import { scale } from './scale.js';
import { selftest } from './selftest.js';
import { tls } from './tls.js';
import { workers } from './workers.js';

/**
 * `npm run bench`: runs the chosen sections in order and prints their tables, the PASS/FAIL/SKIP lines
 * and what was skipped (options and results: docs/benchmarks.md, "Running it"). A section is one module
 * exporting a Section, listed once below.
 */

const SECTIONS: readonly Section[] = [doors, proxy, tls, scale, workers, churn, redisHa, overheads];

const USAGE = `usage: npm run bench -- [--quick] [--only ${SECTIONS.map((s) => s.id).join(',')}] [--workers-list 1,2,4,8] [--cpu-prof] [--selftest]`;

const LATEST = 'latest.json';

function usage(message: string): never {
  console.error(`bench: ${message}\n${USAGE}`);
  process.exit(2);
}

function argsOf(argv: string[]) {
  const options = { help: { type: 'boolean', short: 'h' }, quick: { type: 'boolean' }, 'cpu-prof': { type: 'boolean' }, selftest: { type: 'boolean' }, only: { type: 'string' }, 'workers-list': { type: 'string', default: '1,2,4' } } as const;
  let values;
  try {
    values = parseArgs({ args: argv, options, strict: true }).values;
  } catch (err) {
    usage((err as Error).message);
  }
  if (values.help === true) {
    console.error(USAGE);
    process.exit(0);
  }
  if (!/^\d{1,3}(,\d{1,3})*$/.test(values['workers-list'])) usage('--workers-list takes worker counts such as 1,2,4,8');
  const workersList = values['workers-list'].split(',').map(Number);
  if (workersList.some((n) => n < 1 || n > 256)) usage('--workers-list takes worker counts from 1 to 256');
  const only = values.only?.split(',');
  const unknown = only?.filter((id) => !SECTIONS.some((s) => s.id === id)) ?? [];
  if (unknown.length > 0) usage(`unknown section ${unknown.join(', ')}`);
  return { quick: values.quick === true, only, cpuProf: values['cpu-prof'] === true, workersList, selftest: values.selftest === true };
}

function stamp(d: Date): string {
  return d.toISOString().replace(/:/g, '-').replace(/\.\d+Z$/, 'Z');
}

async function runSection(s: Section, base: Omit<BenchContext, 'procs'>): Promise<SectionResult> {
  const procs = new ProcessGroup();
  const t0 = performance.now();
  // Numbered by place in SECTIONS, so a section keeps its number in a run of --only.
  const title = `${SECTIONS.indexOf(s) + 1}. ${s.title}`;
  base.log(`${s.title}: starting`);
  try {
    const out = await s.run({ ...base, procs });
    return { id: s.id, title, seconds: (performance.now() - t0) / 1000, ...out };
  } catch (err) {
    const message = err instanceof Error ? (err.stack ?? err.message) : String(err);
    base.log(`${s.title}: failed: ${message}`);
    return { id: s.id, title, seconds: (performance.now() - t0) / 1000, baseline: '', rows: [], targets: [], notes: [], error: message };
  } finally {
    await procs.stopAll();
  }
}

async function main(): Promise<number> {
  const args = argsOf(process.argv.slice(2));
  if (args.selftest) return selftest();
  const started = new Date();
  const t0 = performance.now();
  const machine = machineFacts(started);
  const resultsDir = join(ROOT, 'bench', 'results');
  const profileDir = args.cpuProf ? join(resultsDir, `profiles-${stamp(started)}`) : undefined;
  if (profileDir !== undefined) mkdirSync(profileDir, { recursive: true });
  const tmp = mkdtempSync(join(tmpdir(), 'sandgate-bench-'));
  const log = (m: string): void => console.error(`[bench ${((performance.now() - t0) / 1000).toFixed(1).padStart(6)} s] ${m}`);
  const chosen = SECTIONS.filter((s) => args.only === undefined || args.only.includes(s.id));
  const planned = chosen.reduce((sum, s) => sum + s.estimateSeconds[args.quick ? 'quick' : 'full'], 0);
  log(`${args.quick ? 'quick' : 'full'} run on ${machine.cpuModel} × ${machine.cores}, Node ${machine.node}: ${chosen.length} sections, about ${Math.ceil(planned / 60)} min planned`);
  const sections: SectionResult[] = [];
  try {
    for (const s of chosen) {
      const r = await runSection(s, { quick: args.quick, tmp, targetOptions: { profileDir }, workersList: args.workersList, log });
      sections.push(r);
      process.stdout.write(sectionMarkdown(r) + '\n');
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
  const result: RunResult = { mode: args.quick ? 'quick' : 'full', machine, seconds: (performance.now() - t0) / 1000, sections };
  // A profiled run measures the profiler too: it is never the canonical one.
  const canonical = !args.quick && args.only === undefined && !args.cpuProf && sections.every((s) => s.error === undefined);
  const jsonPath = canonical ? join(resultsDir, LATEST) : join(resultsDir, 'runs', `${stamp(started)}-${result.mode}.json`);
  mkdirSync(dirname(jsonPath), { recursive: true });
  if (canonical) {
    // Superseded results go: the folder holds the one run BENCHMARKS.md was made from.
    for (const f of readdirSync(resultsDir)) if (f.endsWith('.json')) rmSync(join(resultsDir, f));
    writeFileSync(join(ROOT, 'BENCHMARKS.md'), runMarkdown(result));
  }
  writeFileSync(jsonPath, JSON.stringify(result, null, 2) + '\n');
  const out = ['### Targets', '', ...targetLines(sections), ''];
  const skipped = skippedLines(sections);
  if (skipped.length > 0) out.push('### Skipped', '', ...skipped, '');
  process.stdout.write(out.join('\n') + '\n');
  log(
    canonical
      ? `results: ${jsonPath}, BENCHMARKS.md`
      : `results: ${jsonPath} (not committed; only a full run of every section without errors replaces ${LATEST} and BENCHMARKS.md)`,
  );
  if (profileDir !== undefined) log(`CPU profiles: ${profileDir} (open in Chrome DevTools)`);
  return sections.some((s) => s.error !== undefined) ? 1 : 0;
}

// Exit even if a client somewhere (a load generator's channel, a Redis client) still holds a handle: the
// run is over and every child has been stopped.
process.exit(await main());

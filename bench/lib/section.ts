import { benchScript } from './machine.js';
import type { ProcessGroup } from './processes.js';
import type { SectionOutput } from './report.js';
import type { TargetOptions } from './targets.js';

/**
 * The contract of one benchmark section: a module exporting a Section, listed once in run.ts. A section
 * starts its processes through `ctx.procs` (the runner stops them when it returns or throws), keeps its
 * load on loopback and bounded in time, and returns rows, targets and notes.
 */

export interface BenchContext {
  readonly quick: boolean;
  /** A scratch folder for this run (sandboxes files, secrets); removed at the end. */
  readonly tmp: string;
  readonly procs: ProcessGroup;
  /** Options for every process under test (CPU profiles with --cpu-prof). */
  readonly targetOptions: TargetOptions;
  /** `--workers-list`: the worker counts the workers section measures. */
  readonly workersList: readonly number[];
  /** Progress line on stderr. */
  log(message: string): void;
}

export interface Section {
  /** Short id for `--only`. */
  readonly id: string;
  readonly title: string;
  /** About how long the section takes, from its configured windows and start-ups (printed as the run's plan). */
  readonly estimateSeconds: { readonly quick: number; readonly full: number };
  run(ctx: BenchContext): Promise<SectionOutput>;
}

/** A comparison's blocks: 6 of 1 s in --quick, 10 of 3 s in a full run, one block of warm-up first. */
export function blocks(ctx: BenchContext): { readonly warmupMs: number; readonly blockMs: number; readonly blocks: number } {
  return ctx.quick ? { warmupMs: 1000, blockMs: 1000, blocks: 6 } : { warmupMs: 3000, blockMs: 3000, blocks: 10 };
}

/** Sends one `probe` request to a fresh child of `script` (`node --expose-gc`) and stops it: the in-process probes. */
export async function probeOnce<T>(ctx: BenchContext, name: string, script: string, args: unknown, execArgv: readonly string[] = []): Promise<T> {
  const child = ctx.procs.node(name, benchScript(script), [], { execArgv: ['--expose-gc', ...execArgv] });
  await child.ready();
  try {
    return await child.request<T>('probe', args);
  } finally {
    await child.stop();
  }
}

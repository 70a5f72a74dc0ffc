import { benchScript } from './machine.js';
import type { ProcessGroup } from './processes.js';
import type { SectionOutput } from './report.js';
import type { TargetOptions } from './targets.js';

/** A section starts its processes through `ctx.procs`, which the runner stops when it returns or throws. */

export interface BenchContext {
  readonly quick: boolean;
  /** A scratch folder, removed at the end of the run. */
  readonly tmp: string;
  readonly procs: ProcessGroup;
  readonly targetOptions: TargetOptions;
  readonly workersList: readonly number[];
  /** Progress line on stderr. */
  log(message: string): void;
}

/**
 * Every section module reads alike on purpose: its constants (sizes, rates, bars), then one Section
 * literal. What they share is this contract; what they measure differs, so nothing more is factored out.
 */
export interface Section {
  readonly id: string;
  readonly title: string;
  /** Printed as the run's plan. */
  readonly estimateSeconds: { readonly quick: number; readonly full: number };
  run(ctx: BenchContext): Promise<SectionOutput>;
}

export function blocks(ctx: BenchContext): { readonly warmupMs: number; readonly blockMs: number; readonly blocks: number } {
  return ctx.quick ? { warmupMs: 1000, blockMs: 1000, blocks: 6 } : { warmupMs: 3000, blockMs: 3000, blocks: 10 };
}

/** One `probe` request to a fresh child of `script`, run with `--expose-gc` for its heap figures. */
export async function probeOnce<T>(ctx: BenchContext, name: string, script: string, args: unknown, execArgv: readonly string[] = []): Promise<T> {
  const child = ctx.procs.node(name, benchScript(script), [], { execArgv: ['--expose-gc', ...execArgv] });
  await child.ready();
  try {
    return await child.request<T>('probe', args);
  } finally {
    await child.stop();
  }
}

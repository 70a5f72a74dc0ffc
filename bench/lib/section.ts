import type { GrpcClientKind } from './grpc-load-worker.js';
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
  /** Load-generator processes for gRPC load, and the client they use. */
  readonly loadProcesses: number;
  readonly grpcClient: GrpcClientKind;
  /** `--install-missing`: a section may install a system package it needs (nginx); else it skips and says why. */
  readonly installMissing: boolean;
  /** Progress line on stderr. */
  log(message: string): void;
}

export interface Section {
  /** Short id for `--only`. */
  readonly id: string;
  readonly title: string;
  run(ctx: BenchContext): Promise<SectionOutput>;
}

/** Window lengths: short in --quick, longer in a full run. */
export interface Timing {
  readonly warmupMs: number;
  readonly durationMs: number;
}

export function timing(ctx: BenchContext, quick: Timing, full: Timing): Timing {
  return ctx.quick ? quick : full;
}

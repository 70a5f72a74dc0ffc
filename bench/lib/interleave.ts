import { mergeRuns, type Measured } from './measure.js';
import type { Timing } from './section.js';

/**
 * measure.ts's baseline-sandgate-sandgate-baseline order for more than two arms: every arm runs for half
 * the window in the order given, then again in the reverse order, and its halves are merged. A drift in
 * whatever else the machine does is then laid on every arm alike (to first order), as abba() does for two.
 */

export type Arm = (w: Timing) => Promise<Measured>;

export async function interleaved<K extends string>(t: Timing, arms: Readonly<Record<K, Arm>>): Promise<Record<K, Measured>> {
  const half: Timing = { warmupMs: t.warmupMs, durationMs: t.durationMs / 2 };
  const keys = Object.keys(arms) as K[];
  const first = new Map<K, Measured>();
  for (const k of keys) first.set(k, await arms[k](half));
  const out = {} as Record<K, Measured>;
  for (const k of [...keys].reverse()) out[k] = mergeRuns(first.get(k)!, await arms[k](half));
  return out;
}

/**
 * Runs every arm once, unrecorded, for `ms`: JIT compilation and connection pools are then behind the
 * measured windows of every arm alike (a proxy's first second runs unoptimised code).
 */
export async function warmUp(arms: Readonly<Record<string, Arm>>, ms: number): Promise<void> {
  for (const arm of Object.values(arms)) await arm({ warmupMs: 0, durationMs: ms });
}

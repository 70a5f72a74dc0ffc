import { readdirSync } from 'node:fs';
import { processCpuMicros, readStat, type Stat } from './proc-stat.js';
import { Target } from './targets.js';

/** `root` and its descendants alive now. */
function processTree(root: number): Map<number, Stat> {
  const stats = new Map<number, Stat>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const s = readStat(Number(name));
    if (s !== undefined) stats.set(Number(name), s);
  }
  const children = new Map<number, number[]>();
  for (const [pid, s] of stats) {
    const list = children.get(s.ppid);
    if (list === undefined) children.set(s.ppid, [pid]);
    else list.push(pid);
  }
  const tree = new Map<number, Stat>();
  const stack = [root];
  while (stack.length > 0) {
    const pid = stack.pop()!;
    const s = stats.get(pid);
    if (s !== undefined) tree.set(pid, s);
    stack.push(...(children.get(pid) ?? []));
  }
  return tree;
}

/** How many processes descend from `root` now (a cluster primary's workers). */
export function descendantCount(root: number): number {
  return Math.max(0, processTree(root).size - 1);
}

/** A cluster primary and its workers, nginx: CPU of every process of the tree still running. */
export class ProcessTreeTarget extends Target {
  static of(t: Target): ProcessTreeTarget {
    return new ProcessTreeTarget(t.child, t.ports);
  }

  override cpuMicrosNow(): number {
    let micros = 0;
    for (const pid of processTree(this.pid).keys()) micros += processCpuMicros(pid) ?? 0;
    return micros;
  }
}

/** Several processes measured as one tier (nginx and the sandgate it asks): CPU summed, ports of the first. */
export class CombinedTarget extends Target {
  constructor(private readonly parts: readonly Target[]) {
    if (parts.length === 0) throw new Error('CombinedTarget needs a part');
    super(parts[0]!.child, parts[0]!.ports);
  }

  override cpuMicrosNow(): number {
    return this.parts.reduce((sum, p) => sum + p.cpuMicrosNow(), 0);
  }
}

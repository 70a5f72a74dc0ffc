import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { Target } from './targets.js';

/**
 * CPU time of processes the heap probe cannot ask: programs that are not Node (nginx) and the workers a
 * gateway forks with `--workers` (the probe in the primary sees only the primary). Read from Linux's
 * /proc/<pid>/stat — utime and stime, in clock ticks — for a process and every descendant alive now.
 */

let ticksPerSecond: number | undefined;

function clockTicks(): number {
  if (ticksPerSecond === undefined) {
    let n = Number.NaN;
    try {
      n = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
    } catch {
      // getconf missing: Linux has used 100 ticks per second on every common architecture for decades.
    }
    ticksPerSecond = Number.isFinite(n) && n > 0 ? n : 100;
  }
  return ticksPerSecond;
}

interface Stat {
  readonly ppid: number;
  /** utime + stime, in ticks. */
  readonly ticks: number;
}

function readStat(pid: number): Stat | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // The command name (field 2) is in parentheses and may hold spaces: count fields after the last ')'.
  const f = text.slice(text.lastIndexOf(')') + 2).split(' ');
  // f[0] is field 3 (state): ppid is field 4, utime 14, stime 15.
  return { ppid: Number(f[1]), ticks: Number(f[11]) + Number(f[12]) };
}

/** `root` and its descendants alive now, with their stats. */
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

/** CPU used so far, in microseconds, by `root` and every descendant that is still running. */
export function processTreeCpuMicros(root: number): number {
  let ticks = 0;
  for (const s of processTree(root).values()) ticks += s.ticks;
  return (ticks / clockTicks()) * 1e6;
}

/** How many processes descend from `root` now (a cluster primary's workers). */
export function descendantCount(root: number): number {
  return Math.max(0, processTree(root).size - 1);
}

/** A target whose CPU is read from /proc for its whole process tree (a cluster primary and its workers, nginx). */
export class ProcessTreeTarget extends Target {
  static of(t: Target): ProcessTreeTarget {
    return new ProcessTreeTarget(t.child, t.ports);
  }

  override async cpuMicros(): Promise<number> {
    const pid = this.child.proc.pid;
    if (pid === undefined) throw new Error(`${this.name} has no process`);
    return processTreeCpuMicros(pid);
  }
}

/** Several processes measured as one tier (nginx and the sandgate it asks): CPU summed, ports of the first. */
export class CombinedTarget extends Target {
  constructor(private readonly parts: readonly Target[]) {
    if (parts.length === 0) throw new Error('CombinedTarget needs a part');
    super(parts[0]!.child, parts[0]!.ports);
  }

  override async cpuMicros(): Promise<number> {
    const each = await Promise.all(this.parts.map((p) => p.cpuMicros()));
    return each.reduce((a, b) => a + b, 0);
  }
}

import { execFile } from 'node:child_process';
import { cpus } from 'node:os';

/**
 * Splits the machine for a section: the load generator (the runner process, where autocannon runs) on
 * the first CPU, every process under test on the others. Where proxy and upstream share the CPUs under
 * test, a proxy made of two processes (nginx + an authz service) cannot buy throughput with a core the
 * one-process proxies leave to the load generator, so the ratios compare CPU spent per request — the
 * conditions of the reference figures in docs/benchmarks.md. Linux `taskset` (util-linux); without it, or
 * with one CPU, nothing is pinned and the caller says so.
 */

function taskset(args: readonly string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile('taskset', [...args], { timeout: 10_000 }, (err, _stdout, stderr) => (err === null ? resolve() : reject(new Error(`taskset ${args.join(' ')}: ${stderr.trim() || err.message}`))));
  });
}

/** `-a`: every thread of the process (V8's and libuv's too), not only its main thread. */
function pinPid(pid: number, list: string): Promise<void> {
  return taskset(['-a', '-p', '-c', list, String(pid)]);
}

export interface CpuSplit {
  /** CPUs of the load generator and of the processes under test, as taskset lists. */
  readonly load: string;
  readonly underTest: string;
  /** Gives the runner every CPU back (children started later must not inherit the pin). */
  restore(): Promise<void>;
}

/** Pins this process to CPU 0 and `pids` to the rest; a string says why nothing was pinned. */
export async function splitCpus(pids: readonly number[]): Promise<CpuSplit | string> {
  const n = cpus().length;
  if (process.platform !== 'linux') return 'not pinned: CPU affinity is set with Linux taskset';
  if (n < 2) return 'not pinned: one CPU';
  const all = `0-${n - 1}`;
  const underTest = n === 2 ? '1' : `1-${n - 1}`;
  try {
    for (const pid of pids) await pinPid(pid, underTest);
    await pinPid(process.pid, '0');
  } catch (err) {
    for (const pid of [...pids, process.pid]) await pinPid(pid, all).catch(() => {});
    return `not pinned: ${err instanceof Error ? err.message : String(err)}`;
  }
  return { load: '0', underTest, restore: () => pinPid(process.pid, all) };
}

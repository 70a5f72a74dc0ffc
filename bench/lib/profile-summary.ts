import { readFileSync } from 'node:fs';
import { basename } from 'node:path';

/**
 * Summarises a V8 .cpuprofile (as `node --cpu-prof` writes, and `npm run bench -- --cpu-prof` for every
 * process under test): the functions with the most self time, and, with `--total`, the most inclusive time.
 *
 *   node dist/bench/lib/profile-summary.js FILE.cpuprofile [--top N] [--total]
 */

interface CallFrame {
  readonly functionName: string;
  readonly url: string;
  readonly lineNumber: number;
}

interface ProfileNode {
  readonly id: number;
  readonly callFrame: CallFrame;
  readonly children?: readonly number[];
}

interface CpuProfile {
  readonly nodes: readonly ProfileNode[];
  readonly samples: readonly number[];
  readonly timeDeltas: readonly number[];
}

function where(f: CallFrame): string {
  const name = f.functionName === '' ? '(anonymous)' : f.functionName;
  if (f.url === '') return name;
  const parts = f.url.split('/');
  return `${name} ${parts.slice(-2).join('/')}:${f.lineNumber + 1}`;
}

export interface ProfileLine {
  readonly percent: number;
  readonly ms: number;
  readonly where: string;
}

/** Self time (or inclusive time) per function, largest first. */
export function summariseProfile(p: CpuProfile, inclusive: boolean): ProfileLine[] {
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const selfUs = new Map<number, number>();
  for (let i = 0; i < p.samples.length; i++) selfUs.set(p.samples[i]!, (selfUs.get(p.samples[i]!) ?? 0) + (p.timeDeltas[i] ?? 0));
  const totals = new Map<string, number>();
  if (inclusive) {
    const parent = new Map<number, number>();
    for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
    for (const [id, us] of selfUs) {
      // Each function counts once per sample, however deep it recurses.
      const seen = new Set<string>();
      for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
        const key = where(byId.get(cur)!.callFrame);
        if (seen.has(key)) continue;
        seen.add(key);
        totals.set(key, (totals.get(key) ?? 0) + us);
      }
    }
  } else {
    for (const [id, us] of selfUs) {
      const key = where(byId.get(id)!.callFrame);
      totals.set(key, (totals.get(key) ?? 0) + us);
    }
  }
  const all = [...selfUs.values()].reduce((a, b) => a + b, 0);
  return [...totals]
    .map(([w, us]) => ({ percent: (us / all) * 100, ms: us / 1000, where: w }))
    .sort((a, b) => b.ms - a.ms);
}

function main(argv: readonly string[]): void {
  const file = argv.find((a) => !a.startsWith('--'));
  if (file === undefined) {
    console.error('usage: node dist/bench/lib/profile-summary.js FILE.cpuprofile [--top N] [--total]');
    process.exit(2);
  }
  const topAt = argv.indexOf('--top');
  const top = topAt >= 0 ? Number(argv[topAt + 1]) : 30;
  const inclusive = argv.includes('--total');
  const lines = summariseProfile(JSON.parse(readFileSync(file, 'utf8')) as CpuProfile, inclusive);
  console.log(`${basename(file)}: ${inclusive ? 'inclusive' : 'self'} time`);
  for (const l of lines.slice(0, top)) console.log(`${l.percent.toFixed(1).padStart(5)} %  ${l.ms.toFixed(0).padStart(7)} ms  ${l.where}`);
}

if (process.argv[1] !== undefined && basename(process.argv[1]) === 'profile-summary.js') main(process.argv.slice(2));

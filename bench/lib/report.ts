import type { MachineFacts } from './machine.js';

/**
 * What a section reports and how the run is written out: one table per section in which every row holds
 * the figure, the baseline measured in the same run, and their ratio; then the targets as PASS/FAIL lines.
 */

export interface Row {
  readonly measure: string;
  readonly unit: string;
  readonly value: number | undefined;
  readonly baseline: number | undefined;
  /** value ÷ baseline. */
  readonly ratio: number | undefined;
  readonly note?: string | undefined;
}

/** A row; the ratio is computed when both figures are there. */
export function row(measure: string, unit: string, value: number | undefined, baseline?: number, note?: string): Row {
  const ratio = value !== undefined && baseline !== undefined && baseline !== 0 ? value / baseline : undefined;
  return { measure, unit, value, baseline, ratio, note };
}

export type Verdict = 'PASS' | 'FAIL' | 'SKIP';

export interface TargetResult {
  readonly verdict: Verdict;
  /** The target as the issue states it. */
  readonly target: string;
  /** What was measured, or why it was skipped. */
  readonly detail: string;
  /** The judged figure as the median of paired trials with its spread, to compare a quick run with a full one. */
  readonly judged?: JudgedFigure | undefined;
}

export interface JudgedFigure {
  readonly median: number;
  readonly min: number;
  readonly max: number;
  readonly unit: string;
}

export function target(name: string, pass: boolean | undefined, detail: string, judged?: JudgedFigure): TargetResult {
  return { verdict: pass === undefined ? 'SKIP' : pass ? 'PASS' : 'FAIL', target: name, detail, judged };
}

export interface SectionOutput {
  /** What the baseline column is in this section. */
  readonly baseline: string;
  readonly rows: readonly Row[];
  readonly targets: readonly TargetResult[];
  /** Sub-sections that could not run ("skipped: …"), warnings about the measurement. */
  readonly notes: readonly string[];
  /** Raw figures for the JSON file. */
  readonly data?: unknown;
}

export interface SectionResult extends SectionOutput {
  readonly id: string;
  readonly title: string;
  readonly seconds: number;
  readonly error?: string | undefined;
}

export interface RunResult {
  readonly mode: 'quick' | 'full';
  readonly machine: MachineFacts;
  readonly seconds: number;
  readonly sections: readonly SectionResult[];
}

function formatNumber(v: number | undefined, unit = ''): string {
  if (v === undefined || Number.isNaN(v)) return '—';
  const a = Math.abs(v);
  let s: string;
  if (a === 0) s = '0';
  else if (a >= 100_000) s = Math.round(v).toLocaleString('en-US');
  else if (a >= 100) s = v.toFixed(0);
  else if (a >= 10) s = v.toFixed(1);
  else if (a >= 1) s = v.toFixed(2);
  else if (a >= 0.01) s = v.toFixed(3);
  else s = v.toPrecision(2);
  return unit === '' ? s : `${s} ${unit}`;
}

function formatRatio(r: number | undefined): string {
  return r === undefined ? '—' : `${r.toFixed(2)}×`;
}

export function sectionMarkdown(s: SectionResult): string {
  const lines = [`### ${s.title}`, ''];
  if (s.error !== undefined) {
    lines.push(`Section failed: ${s.error.split('\n')[0]}`, '');
    return lines.join('\n');
  }
  if (s.rows.length > 0) {
    lines.push(`| measure | sandgate | baseline: ${s.baseline} | ratio |`, '|---|---:|---:|---:|');
    for (const r of s.rows) {
      const measure = r.note === undefined ? r.measure : `${r.measure} (${r.note})`;
      lines.push(`| ${measure} | ${formatNumber(r.value, r.unit)} | ${formatNumber(r.baseline, r.unit)} | ${formatRatio(r.ratio)} |`);
    }
    lines.push('');
  }
  for (const n of s.notes) lines.push(`- ${n}`);
  if (s.notes.length > 0) lines.push('');
  return lines.join('\n');
}

export function targetLines(sections: readonly SectionResult[]): string[] {
  const out: string[] = [];
  for (const s of sections) for (const t of s.targets) out.push(`${t.verdict.padEnd(4)}  ${t.target}: ${t.detail}`);
  return out;
}

/** Everything a section could not run, and why (its "skipped: …" notes and SKIP targets). */
export function skippedLines(sections: readonly SectionResult[]): string[] {
  const out: string[] = [];
  for (const s of sections) {
    if (s.error !== undefined) out.push(`- ${s.title}: the section failed: ${s.error.split('\n')[0]}`);
    for (const n of s.notes) if (/skipped/i.test(n)) out.push(`- ${s.title}: ${n}`);
    for (const t of s.targets) if (t.verdict === 'SKIP') out.push(`- ${t.target}: ${t.detail}`);
  }
  return out;
}

/**
 * Each judged figure of this run beside the same target's in an earlier run: they agree when each median
 * lies within the other's spread (a --quick run and a full one must).
 */
export function agreementLines(now: readonly SectionResult[], before: readonly SectionResult[]): string[] {
  const earlier = new Map<string, JudgedFigure>();
  for (const s of before) for (const t of s.targets) if (t.judged !== undefined) earlier.set(t.target, t.judged);
  const out: string[] = [];
  for (const s of now) {
    for (const t of s.targets) {
      const a = t.judged;
      const b = earlier.get(t.target);
      if (a === undefined || b === undefined) continue;
      const agree = (a.median >= b.min && a.median <= b.max) || (b.median >= a.min && b.median <= a.max);
      const f = (j: JudgedFigure): string => `${j.median.toFixed(2)} ${j.unit} (${j.min.toFixed(2)} … ${j.max.toFixed(2)})`;
      out.push(`${agree ? 'agree ' : 'DIFFER'}  ${t.target}: now ${f(a)}, then ${f(b)}`);
    }
  }
  if (out.length === 0) out.push('no judged figure in common');
  return out;
}

/** The whole run as markdown: what BENCHMARKS.md holds and what the runner prints. */
export function runMarkdown(r: RunResult): string {
  const m = r.machine;
  const parts = [
    '# Benchmarks',
    '',
    'Generated by `npm run bench` (do not edit by hand). How to run it and how to read it: [docs/benchmarks.md](docs/benchmarks.md).',
    'Every figure sits beside a baseline measured in the same run on the same machine; the ratio is',
    'sandgate ÷ baseline (for req/s higher is better, for latency and memory lower is better). Load',
    'generator and target share the machine below, so absolute figures are of this machine only.',
    '',
    '| | |',
    '|---|---|',
    `| date | ${m.date} |`,
    `| commit | ${m.commit}${m.dirty ? ' + uncommitted changes' : ''} |`,
    `| mode | ${r.mode} (${Math.round(r.seconds)} s) |`,
    `| CPU | ${m.cpuModel} × ${m.cores} |`,
    `| memory | ${(m.memoryBytes / 2 ** 30).toFixed(1)} GiB |`,
    `| Node | ${m.node} (V8 ${m.v8}), ${m.platform} |`,
    `| Redis | ${m.redis ?? 'not installed'} |`,
    '',
    ...r.sections.map(sectionMarkdown),
    '### Targets',
    '',
    '```',
    ...targetLines(r.sections),
    '```',
    '',
  ];
  return parts.join('\n');
}

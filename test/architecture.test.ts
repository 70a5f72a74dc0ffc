import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

/** docs/architecture.md's part table ("may import") against the imports in src/. */
const SRC = fileURLToPath(new URL('../src', import.meta.url));

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? files(p) : p.endsWith('.ts') ? [p] : [];
  });
}

/** Every module `text` imports: static imports and re-exports, bare `import '…'`, and dynamic `import('…')`. */
function specifiersOf(text: string): string[] {
  return [...text.matchAll(/(?:^(?:import|export)[^'"]*from |^import |\bimport\()'([^']+)'/gm)].map((m) => m[1]!);
}

/** The project files `file` imports, as paths relative to src/. */
function importsOf(file: string, specifiers: readonly string[]): string[] {
  return specifiers.filter((s) => s.startsWith('.')).map((s) => relative(SRC, join(file, '..', s.replace(/\.js$/, '.ts'))));
}

const partOf = (rel: string): string => rel.split('/')[0]!.replace(/\.ts$/, '');

interface Row {
  readonly parts: string[];
  /** What the "owns" cell names in backticks: files (`x.ts`, `config/x.ts`) and folders (`envoy/`). */
  readonly named: string[];
}

function table(): { parts: Map<string, string[] | 'everything'>; rows: Row[] } {
  const doc = readFileSync(new URL('../docs/architecture.md', import.meta.url), 'utf8');
  const section = doc.slice(doc.indexOf('## Parts'));
  const parts = new Map<string, string[] | 'everything'>();
  const rows: Row[] = [];
  for (const line of section.split('\n').filter((l) => l.startsWith('| `src/'))) {
    const cells = line.split('|').map((c) => c.trim());
    const row = { parts: [...cells[1]!.matchAll(/`src\/([a-z-]+)(?:\/|\.ts)`/g)].map((m) => m[1]!), named: [...cells[2]!.matchAll(/`([a-z-]+(?:\/[a-z-]+)*(?:\.ts|\/))`/g)].map((m) => m[1]!) };
    const may = cells[cells.length - 2]!;
    const allowed = may === 'everything' ? 'everything' : [...may.matchAll(/`([a-z-]+)`/g)].map((m) => m[1]!);
    for (const p of row.parts) parts.set(p, allowed);
    rows.push(row);
  }
  return { parts, rows };
}

describe('docs/architecture.md part table matches the imports', () => {
  const { parts, rows } = table();
  const all = files(SRC).map((f) => {
    const text = readFileSync(f, 'utf8');
    const specifiers = specifiersOf(text);
    return { rel: relative(SRC, f), text, specifiers, imports: importsOf(f, specifiers) };
  });

  it('every part under src/ is in the table, and every part in the table is under src/', () => {
    for (const { rel } of all) expect(parts.has(partOf(rel)), rel).toBe(true);
    const present = new Set(all.map((f) => partOf(f.rel)));
    for (const part of parts.keys()) expect(present.has(part), `the table's src/${part}`).toBe(true);
  });

  it('every file and folder a row says its parts own exists in one of them', () => {
    const dirs = new Set(all.flatMap(({ rel }) => rel.split('/').slice(0, -1).map((_, i, a) => a.slice(0, i + 1).join('/'))));
    for (const { parts: own, named } of rows) {
      for (const name of named) {
        const inParts = name.endsWith('/')
          ? [...dirs].some((d) => own.includes(partOf(d)) && `${d}/`.endsWith(`/${name}`))
          : all.some(({ rel }) => own.includes(partOf(rel)) && (rel === name || rel.endsWith(`/${name}`)));
        // A path from the repository's root (the console's page, assets/console/) lies outside src/.
        const found = inParts || existsSync(fileURLToPath(new URL(`../${name}`, import.meta.url)));
        expect(found, `${name} (owned by ${own.join(', ')})`).toBe(true);
      }
    }
  });

  it('no part imports one the table does not allow', () => {
    for (const { rel, imports } of all) {
      const allowed = parts.get(partOf(rel));
      if (allowed === 'everything') continue;
      for (const target of imports) {
        const p = partOf(target);
        if (p !== partOf(rel)) expect(allowed, `${rel} imports ${target}`).toContain(p);
      }
    }
  });

  it('every import the table allows is used (the table is not wider than the code)', () => {
    for (const [part, allowed] of parts) {
      if (allowed === 'everything') continue;
      const used = new Set(all.filter((f) => partOf(f.rel) === part).flatMap((f) => f.imports.map(partOf)));
      for (const a of allowed) expect([...used], `${part} may import ${a}`).toContain(a);
    }
  });

  it('domain is pure: no Node module but node:crypto (hashing), no package, no clock read, no timer', () => {
    for (const { rel, text, specifiers } of all.filter((f) => partOf(f.rel) === 'domain')) {
      for (const s of specifiers.filter((x) => !x.startsWith('.'))) expect(s, rel).toBe('node:crypto');
      expect(text, rel).not.toMatch(/Date\.now\(|new Date\(\)|performance\.now\(|hrtime|setTimeout\(|setInterval\(/);
    }
  });

  it('lib imports only the error type of domain (the table: "its error type only")', () => {
    for (const { rel, imports } of all.filter((f) => partOf(f.rel) === 'lib')) {
      for (const t of imports.filter((x) => partOf(x) === 'domain')) expect(t, rel).toBe('domain/errors.ts');
    }
  });

  it('no cycle of imports that load code (import type is erased at compile and may point back)', () => {
    const loads = new Map(all.map(({ rel, text }) => [rel, importsOf(join(SRC, rel), [...text.matchAll(/^(?:import|export) (?!type )[^'"]*from '([^']+)'|^import '([^']+)'|\bimport\('([^']+)'\)/gm)].map((m) => (m[1] ?? m[2] ?? m[3])!))]));
    const done = new Set<string>();
    const path: string[] = [];
    const visit = (rel: string): void => {
      const at = path.indexOf(rel);
      expect(at, `import cycle: ${[...path.slice(at), rel].join(' → ')}`).toBe(-1);
      if (done.has(rel)) return;
      path.push(rel);
      for (const t of loads.get(rel) ?? []) visit(t);
      path.pop();
      done.add(rel);
    };
    for (const rel of loads.keys()) visit(rel);
  });

  it('the lifecycle has one room: activity, idle pause, wake and the writer lock live in lifecycle/ alone', () => {
    const room = ['activity-log.ts', 'activity-recorder.ts', 'activity-reporter.ts', 'idle-controller.ts', 'resumer.ts', 'lifecycle-channel.ts'];
    for (const name of room) expect(all.filter(({ rel }) => rel.endsWith(`/${name}`)).map((f) => f.rel)).toEqual([`lifecycle/${name}`]);
    for (const { rel, imports } of all.filter((f) => partOf(f.rel) === 'observability')) for (const t of imports) expect(t, rel).not.toMatch(/^(edge|lifecycle|gateway)\//);
  });

  it('edge/forwarding imports neither edge/proxy nor edge/relay, and edge/relay does not import edge/proxy', () => {
    for (const { rel, imports } of all) {
      if (rel.startsWith('edge/forwarding/')) for (const t of imports) expect(t, rel).not.toMatch(/^edge\/(proxy|relay)\//);
      if (rel.startsWith('edge/relay/')) for (const t of imports) expect(t, rel).not.toMatch(/^edge\/proxy\//);
    }
  });
});

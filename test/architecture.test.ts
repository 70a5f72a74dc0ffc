import { readdirSync, readFileSync, statSync } from 'node:fs';
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

/** The project files `file` imports, as paths relative to src/. */
function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  return [...text.matchAll(/^(?:import|export)[^'"]*from '(\.{1,2}\/[^']+)'/gm)].map((m) => relative(SRC, join(file, '..', m[1]!.replace(/\.js$/, '.ts'))));
}

const partOf = (rel: string): string => rel.split('/')[0]!.replace(/\.ts$/, '');

function table(): Map<string, string[] | 'everything'> {
  const doc = readFileSync(new URL('../docs/architecture.md', import.meta.url), 'utf8');
  const section = doc.slice(doc.indexOf('## Parts'));
  const out = new Map<string, string[] | 'everything'>();
  for (const row of section.split('\n').filter((l) => l.startsWith('| `src/'))) {
    const cells = row.split('|').map((c) => c.trim());
    const parts = [...cells[1]!.matchAll(/`src\/([a-z-]+)(?:\/|\.ts)`/g)].map((m) => m[1]!);
    const may = cells[cells.length - 2]!;
    const allowed = may === 'everything' ? 'everything' : [...may.matchAll(/`([a-z-]+)`/g)].map((m) => m[1]!);
    for (const p of parts) out.set(p, allowed);
  }
  return out;
}

describe('docs/architecture.md part table matches the imports', () => {
  const parts = table();
  const all = files(SRC).map((f) => ({ rel: relative(SRC, f), imports: importsOf(f) }));

  it('every part under src/ is in the table', () => {
    for (const { rel } of all) expect(parts.has(partOf(rel)), rel).toBe(true);
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

  it('edge/forwarding imports neither edge/proxy nor edge/relay, and edge/relay does not import edge/proxy', () => {
    for (const { rel, imports } of all) {
      if (rel.startsWith('edge/forwarding/')) for (const t of imports) expect(t, rel).not.toMatch(/^edge\/(proxy|relay)\//);
      if (rel.startsWith('edge/relay/')) for (const t of imports) expect(t, rel).not.toMatch(/^edge\/proxy\//);
    }
  });
});

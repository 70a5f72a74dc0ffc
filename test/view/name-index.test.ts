import { describe, expect, it } from 'vitest';
import { NameIndex } from '../../src/view/name-index.js';

interface Entry {
  readonly namespace: string;
  readonly name: string;
  readonly n: number;
}

/** A seeded generator, so a failure replays. */
function lcg(seed: number): (n: number) => number {
  let x = seed >>> 0;
  return (n) => {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    return (x >>> 8) % n;
  };
}

describe('NameIndex', () => {
  // Against a Map, through adds, replacements (half of them right after a get, half not) and deletions that
  // grow the table from 16 slots and run its probe runs across the end: every lookup agrees with the Map.
  it.each([0, 1, 0x7fffffff, 0x2545f491])('agrees with a Map through random adds, replacements and deletions (seed %i)', (seed) => {
    const index = new NameIndex<Entry>(seed);
    const model = new Map<string, Entry>();
    const next = lcg(seed + 1);
    const namespaces = ['a', 'team-b', 'c'];
    const names = Array.from({ length: 120 }, (_, i) => `sb-${i}`);
    for (let step = 0; step < 6000; step++) {
      const namespace = namespaces[next(namespaces.length)]!;
      const name = names[next(names.length)]!;
      const key = namespace + '/' + name;
      if (next(3) === 0) {
        expect(index.delete(namespace, name)).toBe(model.delete(key));
      } else {
        // As the view does on an update: read the sandbox, then set its new entry.
        if (next(2) === 0) expect(index.get(namespace, name)).toBe(model.get(key));
        const e = { namespace, name, n: step };
        index.set(e);
        model.set(key, e);
      }
      expect(index.size).toBe(model.size);
      if (step % 97 === 0) {
        for (const ns of namespaces) for (const n of names) expect(index.get(ns, n)).toBe(model.get(ns + '/' + n));
      }
    }
    for (const ns of namespaces) for (const n of names) expect(index.get(ns, n)).toBe(model.get(ns + '/' + n));
  });

  it('tells namespaces apart, and names that differ by one character', () => {
    const index = new NameIndex<Entry>(7);
    index.set({ namespace: 'team-a', name: 'web', n: 1 });
    expect(index.get('team-a', 'web')?.n).toBe(1);
    expect(index.get('team-b', 'web')).toBeUndefined();
    expect(index.get('team-a', 'wed')).toBeUndefined();
    expect(index.get('team-aw', 'eb')).toBeUndefined();
    expect(index.get('team', 'a/web')).toBeUndefined();
  });

  it('holds 200,000 names, each found again, and empties to nothing', () => {
    const index = new NameIndex<Entry>();
    const count = 200_000;
    for (let i = 0; i < count; i++) index.set({ namespace: `ns-${i % 16}`, name: `sb-${i}`, n: i });
    expect(index.size).toBe(count);
    let lost = 0;
    for (let i = 0; i < count; i++) if (index.get(`ns-${i % 16}`, `sb-${i}`)?.n !== i) lost++;
    expect(lost).toBe(0);
    expect(index.get('ns-0', 'sb-1')).toBeUndefined();
    for (let i = 0; i < count; i++) if (!index.delete(`ns-${i % 16}`, `sb-${i}`)) lost++;
    expect(lost).toBe(0);
    expect(index.size).toBe(0);
    expect(index.get('ns-0', 'sb-0')).toBeUndefined();
  });
});

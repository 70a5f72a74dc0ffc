import { randomInt } from 'node:crypto';

/**
 * Sandboxes by namespace and name: the index every request reads (SandboxView.get). An open-addressing
 * table with linear probing, written for a view of a million sandboxes, where each object a lookup reads
 * misses the cache. A slot's hash and its entry sit at the same index of two arrays, loaded side by side;
 * the entry is then read once, for its name and namespace and for everything decide() needs. A Map keyed
 * by name would read its bucket, then its chained entry, then the stored key, before reaching the entry.
 *
 * The hash is seeded per index from a random number, so names chosen to collide on one gateway's table
 * do not collide on another's, and a lookup always compares the names themselves: a hash alone never
 * routes. At most half the slots are used (the table doubles past that); a deletion shifts the rest of
 * its probe run back, so no tombstones build up. The table does not shrink: after a mass deletion it
 * keeps the size of its peak: twelve bytes per slot (a 4-byte hash and a reference), and two slots per
 * sandbox just before the table doubles, four just after.
 */

export interface Named {
  readonly namespace: string;
  readonly name: string;
}

const INITIAL_CAPACITY = 16;
const FNV_PRIME = 0x01000193;

export class NameIndex<E extends Named> {
  /** Each slot's hash, never 0; 0 marks an empty slot. */
  private hashes = new Int32Array(INITIAL_CAPACITY);
  private slots: (E | undefined)[] = new Array<E | undefined>(INITIAL_CAPACITY).fill(undefined);
  private mask = INITIAL_CAPACITY - 1;
  private count = 0;

  constructor(private readonly seed: number = randomInt(0x7fffffff)) {}

  get size(): number {
    return this.count;
  }

  get(namespace: string, name: string): E | undefined {
    const i = this.find(this.hash(namespace, name), namespace, name);
    return this.hashes[i] === 0 ? undefined : this.slots[i];
  }

  /** Adds `entry`, or replaces the entry of the same namespace and name. */
  set(entry: E): void {
    const h = this.hash(entry.namespace, entry.name);
    const i = this.find(h, entry.namespace, entry.name);
    if (this.hashes[i] !== 0) {
      this.slots[i] = entry;
      return;
    }
    if ((this.count + 1) * 2 > this.hashes.length) {
      this.grow();
      this.place(h, entry);
    } else {
      this.hashes[i] = h;
      this.slots[i] = entry;
    }
    this.count++;
  }

  delete(namespace: string, name: string): boolean {
    const { hashes, slots, mask } = this;
    let hole = this.find(this.hash(namespace, name), namespace, name);
    if (hashes[hole] === 0) return false;
    // Backward shift: each later slot of the run moves into the hole unless its home lies cyclically
    // after the hole (up to itself), where moving it would put it before its home.
    for (let j = (hole + 1) & mask; hashes[j] !== 0; j = (j + 1) & mask) {
      const home = hashes[j]! & mask;
      if (((j - home) & mask) >= ((j - hole) & mask)) {
        hashes[hole] = hashes[j]!;
        slots[hole] = slots[j];
        hole = j;
      }
    }
    hashes[hole] = 0;
    slots[hole] = undefined;
    this.count--;
    return true;
  }

  /** The slot holding `namespace`/`name`, or the empty slot that ends its probe run. */
  private find(h: number, namespace: string, name: string): number {
    const { hashes, slots, mask } = this;
    for (let i = h & mask; ; i = (i + 1) & mask) {
      const at = hashes[i]!;
      if (at === 0) return i;
      if (at === h) {
        const e = slots[i]!;
        if (e.name === name && e.namespace === namespace) return i;
      }
    }
  }

  private place(h: number, entry: E): void {
    let i = h & this.mask;
    while (this.hashes[i] !== 0) i = (i + 1) & this.mask;
    this.hashes[i] = h;
    this.slots[i] = entry;
  }

  private grow(): void {
    const hashes = this.hashes;
    const slots = this.slots;
    const capacity = hashes.length * 2;
    this.hashes = new Int32Array(capacity);
    this.slots = new Array<E | undefined>(capacity).fill(undefined);
    this.mask = capacity - 1;
    for (let i = 0; i < hashes.length; i++) if (hashes[i] !== 0) this.place(hashes[i]!, slots[i]!);
  }

  /** FNV-1a over `<namespace>/<name>` from the seed, then a final mix; never 0. */
  private hash(namespace: string, name: string): number {
    let h = this.seed;
    for (let i = 0; i < namespace.length; i++) h = Math.imul(h ^ namespace.charCodeAt(i), FNV_PRIME);
    h = Math.imul(h ^ 0x2f, FNV_PRIME);
    for (let i = 0; i < name.length; i++) h = Math.imul(h ^ name.charCodeAt(i), FNV_PRIME);
    h ^= h >>> 16;
    h = Math.imul(h, 0x7feb352d);
    h ^= h >>> 15;
    return h === 0 ? 1 : h;
  }
}

import { compareClaimants, type IdClaimant } from '../domain/sandbox-ids.js';

/**
 * Declared id → the sandbox that holds it (domain/sandbox-ids.ts has the rules). The holder of an id is the
 * first of its claimants in claim order, recomputed whenever a claimant comes, changes or goes: the index
 * is a function of the set of sandboxes, never of the order their events arrived in. An uncontested id
 * costs one map entry; the claimant set is kept only while two or more sandboxes declare the id.
 */

export interface Claim extends IdClaimant {
  /** `<namespace>/<name>`. */
  readonly key: string;
}

export class IdIndex {
  /** id → key of its holder. */
  private readonly holders = new Map<string, string>();
  /** id → keys of every claimant, while there are two or more. */
  private readonly rivals = new Map<string, Set<string>>();

  /** `claimOf` reads a sandbox's current claim (the view's entries). */
  constructor(private readonly claimOf: (key: string) => IdClaimant | undefined) {}

  /** Key of the sandbox holding `id`. */
  holder(id: string): string | undefined {
    return this.holders.get(id);
  }

  /**
   * Moves `c`'s claims from `before` to `after` (ids in both are re-ranked: the claimant may be a new
   * incarnation with another creation time). Returns the keys of the other sandboxes that gained or lost
   * an id, so the view can recompose their status.
   */
  update(c: Claim, before: readonly string[], after: readonly string[]): Set<string> {
    const changed = new Set<string>();
    const claimOf = (key: string): IdClaimant | undefined => (key === c.key ? c : this.claimOf(key));
    for (const id of before) if (!after.includes(id)) this.release(id, c.key, claimOf, changed);
    for (const id of after) this.claim(id, c.key, claimOf, changed);
    changed.delete(c.key);
    return changed;
  }

  private claim(id: string, key: string, claimOf: (key: string) => IdClaimant | undefined, changed: Set<string>): void {
    const prev = this.holders.get(id);
    if (prev === undefined) {
      this.holders.set(id, key);
      return;
    }
    let set = this.rivals.get(id);
    if (set === undefined) {
      if (prev === key) return;
      set = new Set([prev]);
      this.rivals.set(id, set);
    }
    set.add(key);
    this.rank(id, set, prev, claimOf, changed);
  }

  private release(id: string, key: string, claimOf: (key: string) => IdClaimant | undefined, changed: Set<string>): void {
    const set = this.rivals.get(id);
    const prev = this.holders.get(id);
    if (set === undefined) {
      if (prev === key) this.holders.delete(id);
      return;
    }
    set.delete(key);
    if (set.size <= 1) this.rivals.delete(id);
    this.rank(id, set, prev, claimOf, changed);
  }

  private rank(id: string, set: ReadonlySet<string>, prev: string | undefined, claimOf: (key: string) => IdClaimant | undefined, changed: Set<string>): void {
    let best: string | undefined;
    let bestClaim: IdClaimant | undefined;
    for (const k of set) {
      const c = claimOf(k);
      if (c === undefined) continue;
      if (bestClaim === undefined || compareClaimants(c, bestClaim) < 0) {
        best = k;
        bestClaim = c;
      }
    }
    if (best === undefined) this.holders.delete(id);
    else this.holders.set(id, best);
    if (best !== prev) {
      if (prev !== undefined) changed.add(prev);
      if (best !== undefined) changed.add(best);
    }
  }
}

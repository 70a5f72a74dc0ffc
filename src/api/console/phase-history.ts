import type { PublicPhase } from '../../domain/sandbox.js';
import type { SandboxView } from '../../view/sandbox-view.js';

/**
 * The console's "recent phase changes": the last `capacity` phase transitions of the whole view, in a fixed
 * ring (bounded memory whatever the number of sandboxes: the default keeps 10,000 transitions, about a
 * megabyte). Changes that leave the phase as it was (a new resourceVersion, a presence epoch) are not
 * recorded. A sandbox's history is found by scanning the ring, only when an operator opens its detail.
 */

export interface PhaseChange {
  /** Epoch ms of the change, on this gateway's clock. */
  readonly at: number;
  /** null: the sandbox entered the view. */
  readonly from: PublicPhase | null;
  /** null: the sandbox left the view. */
  readonly to: PublicPhase | null;
  readonly reason: string;
  readonly rule: string;
}

interface Recorded extends PhaseChange {
  readonly key: string;
}

export class PhaseHistory {
  private readonly ring: (Recorded | undefined)[];
  private next = 0;

  constructor(
    view: SandboxView,
    private readonly now: () => number,
    readonly capacity = 10_000,
  ) {
    this.ring = new Array<Recorded | undefined>(capacity).fill(undefined);
    view.onChange((key, entry, _version, previous) => {
      const from = previous?.status.phase ?? null;
      const to = entry?.status.phase ?? null;
      if (from === to) return;
      this.ring[this.next] = { key, at: this.now(), from, to, reason: entry?.status.reason ?? '', rule: entry?.status.rule ?? '' };
      this.next = (this.next + 1) % this.capacity;
    });
  }

  /** The most recent phase changes of one sandbox (`namespace/name`), newest first. */
  of(key: string, limit = 20): PhaseChange[] {
    const out: PhaseChange[] = [];
    for (let i = 1; i <= this.capacity && out.length < limit; i++) {
      const r = this.ring[(this.next - i + this.capacity) % this.capacity];
      if (r === undefined) break;
      if (r.key === key) out.push({ at: r.at, from: r.from, to: r.to, reason: r.reason, rule: r.rule });
    }
    return out;
  }
}

/**
 * A latency histogram with bounded relative error, in the spirit of HdrHistogram: values (nanoseconds) are
 * kept exactly below 128 and in 64 linear sub-buckets per power of two above, so any recorded value is off
 * by less than 1.6 %. Load workers in other processes ship theirs as sparse pairs and the runner merges them.
 *
 * autocannon's own histogram records whole milliseconds, which says nothing about a loopback authz call that
 * takes tens of microseconds; that is why the suite keeps its own.
 */

const SUB = 64;
const EXACT = 2 * SUB;

function indexOf(v: number): number {
  if (v < EXACT) return v < 0 ? 0 : Math.floor(v);
  let shift = Math.floor(Math.log2(v)) - 6;
  let top = Math.floor(v / 2 ** shift);
  // log2 of a float can land one off near a power of two; the top must be in [64, 128).
  if (top >= EXACT) {
    shift++;
    top = Math.floor(v / 2 ** shift);
  } else if (top < SUB) {
    shift--;
    top = Math.floor(v / 2 ** shift);
  }
  return EXACT + (shift - 1) * SUB + (top - SUB);
}

/** The middle of the values that land in bucket `i`. */
function valueOf(i: number): number {
  if (i < EXACT) return i;
  const shift = Math.floor((i - EXACT) / SUB) + 1;
  const top = ((i - EXACT) % SUB) + SUB;
  return (top + 0.5) * 2 ** shift;
}

export type SparseCounts = readonly (readonly [number, number])[];

export class Histogram {
  private counts: number[] = [];
  private total = 0;
  private sum = 0;
  private maxValue = 0;

  /** Records one value in nanoseconds. */
  record(ns: number): void {
    const i = indexOf(ns);
    this.counts[i] = (this.counts[i] ?? 0) + 1;
    this.total++;
    this.sum += ns;
    if (ns > this.maxValue) this.maxValue = ns;
  }

  get count(): number {
    return this.total;
  }

  /** Mean in nanoseconds (exact, not bucketed). */
  get mean(): number {
    return this.total === 0 ? 0 : this.sum / this.total;
  }

  get max(): number {
    return this.maxValue;
  }

  /** The value (ns) below which `p` percent of the recorded values fall. */
  percentile(p: number): number {
    if (this.total === 0) return 0;
    const rank = Math.max(1, Math.ceil((p / 100) * this.total));
    let seen = 0;
    for (let i = 0; i < this.counts.length; i++) {
      seen += this.counts[i] ?? 0;
      if (seen >= rank) return Math.min(valueOf(i), this.maxValue);
    }
    return this.maxValue;
  }

  merge(other: Histogram): void {
    this.mergeSparse(other.toSparse(), other.total, other.sum, other.maxValue);
  }

  toSparse(): SparseCounts {
    const out: [number, number][] = [];
    for (let i = 0; i < this.counts.length; i++) {
      const c = this.counts[i];
      if (c !== undefined && c > 0) out.push([i, c]);
    }
    return out;
  }

  /** For shipping over IPC. */
  toJSON(): HistogramJson {
    return { counts: this.toSparse(), total: this.total, sum: this.sum, max: this.maxValue };
  }

  static fromJSON(j: HistogramJson): Histogram {
    const h = new Histogram();
    h.mergeSparse(j.counts, j.total, j.sum, j.max);
    return h;
  }

  private mergeSparse(counts: SparseCounts, total: number, sum: number, max: number): void {
    for (const [i, c] of counts) this.counts[i] = (this.counts[i] ?? 0) + c;
    this.total += total;
    this.sum += sum;
    if (max > this.maxValue) this.maxValue = max;
  }
}

export interface HistogramJson {
  readonly counts: SparseCounts;
  readonly total: number;
  readonly sum: number;
  readonly max: number;
}

/** p50 / p99 / p99.9 in microseconds, the shape every latency row uses. */
export interface LatencySummary {
  readonly p50: number;
  readonly p99: number;
  readonly p999: number;
  readonly mean: number;
  readonly count: number;
}

export function summarise(h: Histogram): LatencySummary {
  return { p50: h.percentile(50) / 1000, p99: h.percentile(99) / 1000, p999: h.percentile(99.9) / 1000, mean: h.mean / 1000, count: h.count };
}

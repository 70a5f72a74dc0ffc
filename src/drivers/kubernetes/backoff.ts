/**
 * Jittered exponential backoff for reconnecting to the Kubernetes API server, and an abortable sleep.
 *
 * The delay of attempt n is min(maxMs, initialMs · factor^n), then scaled by a random factor in
 * [1 − jitter, 1] so that many gateways that lost the API server at the same moment do not reconnect in
 * lock-step (the "equal jitter" variant: never less than half the nominal delay with the default 0.5).
 * Randomness is passed in so tests are deterministic.
 */

export interface BackoffOptions {
  /** Delay before the first retry, in milliseconds. */
  readonly initialMs: number;
  /** Upper bound of the nominal delay. */
  readonly maxMs: number;
  /** Growth per failed attempt. */
  readonly factor: number;
  /** Share of the delay that is random, 0 (none) to 1 (anywhere in [0, delay]). */
  readonly jitter: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = { initialMs: 500, maxMs: 30_000, factor: 2, jitter: 0.5 };

export class Backoff {
  private attempt = 0;
  private readonly opts: BackoffOptions;

  constructor(
    opts: Partial<BackoffOptions> = {},
    private readonly random: () => number = Math.random,
  ) {
    const o = { ...DEFAULT_BACKOFF, ...opts };
    if (!(o.initialMs >= 0) || !(o.maxMs >= o.initialMs) || !(o.factor >= 1) || !(o.jitter >= 0 && o.jitter <= 1)) {
      throw new RangeError(`invalid backoff options ${JSON.stringify(o)}`);
    }
    this.opts = o;
  }

  /** Failed attempts since the last reset. */
  get attempts(): number {
    return this.attempt;
  }

  /** The delay before the next attempt; each call counts one more failure. */
  next(): number {
    const { initialMs, maxMs, factor, jitter } = this.opts;
    const nominal = Math.min(maxMs, initialMs * Math.pow(factor, this.attempt));
    this.attempt++;
    const r = Math.min(1, Math.max(0, this.random()));
    return Math.round(nominal * (1 - jitter + jitter * r));
  }

  /** Called after a success: the next failure starts from initialMs again. */
  reset(): void {
    this.attempt = 0;
  }
}

/** Resolves after `ms`, or at once when `signal` aborts (never rejects); the timer never outlives it. */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  if (signal.aborted || ms <= 0) return Promise.resolve();
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}

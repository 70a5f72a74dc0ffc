/**
 * The one reconnect backoff (Kubernetes watches, gRPC drivers, supervisors): exponential growth up to a
 * ceiling, with jitter so many clients that lost the same server at the same moment do not reconnect in
 * lock-step. Randomness is passed in so tests are deterministic; and an abortable sleep.
 */

export interface BackoffOptions {
  /** Nominal delay of the first attempt, in milliseconds. */
  readonly initialMs: number;
  /** Upper bound of the nominal delay. */
  readonly maxMs: number;
  /** Growth per failed attempt (default 2). */
  readonly factor?: number;
  /**
   * Share of the delay that is random, 0 (none) to 1 (default: "full jitter", anywhere in [0, delay]).
   * 0.5 is "equal jitter": never less than half the nominal delay.
   */
  readonly jitter?: number;
}

/** The delay before attempt `attempt` (0-based): min(max, initial·factor^attempt), jittered. */
export function backoffDelay(attempt: number, o: BackoffOptions, random: () => number): number {
  const factor = o.factor ?? 2;
  const jitter = o.jitter ?? 1;
  const nominal = Math.min(o.maxMs, o.initialMs * factor ** Math.min(attempt, 30));
  const r = Math.min(1, Math.max(0, random()));
  return Math.floor(nominal * (1 - jitter + jitter * r));
}

/** backoffDelay() with the attempt count kept: next() after each failure, reset() after a success. */
export class Backoff {
  private attempt = 0;

  constructor(
    private readonly opts: BackoffOptions,
    private readonly random: () => number = Math.random,
  ) {
    const { initialMs, maxMs, factor = 2, jitter = 1 } = opts;
    if (!(initialMs >= 0) || !(maxMs >= initialMs) || !(factor >= 1) || !(jitter >= 0 && jitter <= 1)) {
      throw new RangeError(`invalid backoff options ${JSON.stringify(opts)}`);
    }
  }

  /** Failed attempts since the last reset. */
  get attempts(): number {
    return this.attempt;
  }

  /** The delay before the next attempt; each call counts one more failure. */
  next(): number {
    return backoffDelay(this.attempt++, this.opts, this.random);
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

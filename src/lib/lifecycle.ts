/**
 * Start-up and shutdown: components start in order and stop in reverse, a failure during start stops
 * what already started (in reverse) before the error goes on, and every stop shares one deadline so the
 * whole shutdown ends when the deadline does, however many phases it has.
 */

/** A point in time every shutdown phase shares; each phase takes what is left of it. */
export interface Deadline {
  /** Milliseconds left (0 once passed). */
  remainingMs(): number;
}

export function deadlineIn(ms: number, now: () => number = Date.now): Deadline {
  const end = now() + ms;
  return { remainingMs: () => Math.max(0, end - now()) };
}

/** Something started that can be stopped: a listener, a store, a timer. */
export interface Started {
  /** Shown in logs when it fails to stop in time. */
  readonly name: string;
  /** Must give up what it holds (sockets, connections, timers) by the deadline; a stop that overruns is abandoned. */
  stop(deadline: Deadline): Promise<void> | void;
}

export interface StopProblem {
  readonly component: string;
  /** The error it threw, or undefined when it overran the deadline. */
  readonly err: unknown;
}

/**
 * Components started one at a time, each handing back what it started, so a later one is built from an
 * earlier one's result (a bound port, an opened store) rather than from a variable filled in later.
 * Whoever starts them stops them all (in reverse) when one fails, and again at shutdown.
 */
export class Lifecycle {
  private readonly started: Started[] = [];

  constructor(private readonly onProblem: (p: StopProblem) => void) {}

  /** Runs `start`; once it has succeeded, `stop` (given what it returned) is due at shutdown. */
  async start<T>(name: string, start: () => Promise<T> | T, stop: (started: T, deadline: Deadline) => Promise<void> | void): Promise<T> {
    const value = await start();
    this.started.push({ name, stop: (deadline) => stop(value, deadline) });
    return value;
  }

  /** Stops everything started so far, in reverse, within `deadline`; problems are reported, never thrown. */
  stop(deadline: Deadline): Promise<void> {
    return stopAll(this.started.splice(0), deadline, this.onProblem);
  }
}

/** Stops `components` in reverse order, each bounded by what is left of `deadline`; problems are reported, never thrown. */
export async function stopAll(components: readonly Started[], deadline: Deadline, onProblem: (p: StopProblem) => void): Promise<void> {
  for (const c of [...components].reverse()) {
    let timer: NodeJS.Timeout | undefined;
    const overran = new Promise<'overran'>((resolve) => {
      timer = setTimeout(() => resolve('overran'), deadline.remainingMs());
      timer.unref();
    });
    try {
      const outcome = await Promise.race([Promise.resolve().then(() => c.stop(deadline)), overran]);
      if (outcome === 'overran') onProblem({ component: c.name, err: undefined });
    } catch (err) {
      onProblem({ component: c.name, err });
    } finally {
      clearTimeout(timer);
    }
  }
}

/** `fn` run at most once: every call gets the first call's promise (a close that may be called twice). */
export function once<T>(fn: () => Promise<T>): () => Promise<T> {
  let result: Promise<T> | undefined;
  return () => (result ??= fn());
}

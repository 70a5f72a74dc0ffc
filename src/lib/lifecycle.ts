/**
 * Start-up and shutdown as one list: components start in order and stop in reverse, a failure during
 * start stops what already started (in reverse) before the error goes on, and every stop shares one
 * deadline so the whole shutdown ends when the deadline does, however many phases it has.
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

export interface Component {
  /** Shown in logs when it fails to stop in time. */
  readonly name: string;
  start(): Promise<void> | void;
  /** Must give up what it holds (sockets, connections, timers) by the deadline; a stop that overruns is abandoned. */
  stop(deadline: Deadline): Promise<void> | void;
}

export interface StopProblem {
  readonly component: string;
  /** The error it threw, or undefined when it overran the deadline. */
  readonly err: unknown;
}

/**
 * Starts `components` in order. If one throws, the ones already started are stopped in reverse within
 * `unwindMs`, and the start error is rethrown.
 */
export async function startAll(components: readonly Component[], unwindMs: number, onProblem: (p: StopProblem) => void): Promise<void> {
  const started: Component[] = [];
  for (const c of components) {
    try {
      await c.start();
    } catch (err) {
      await stopAll(started, deadlineIn(unwindMs), onProblem);
      throw err;
    }
    started.push(c);
  }
}

/** Stops `components` in reverse order, each bounded by what is left of `deadline`; problems are reported, never thrown. */
export async function stopAll(components: readonly Component[], deadline: Deadline, onProblem: (p: StopProblem) => void): Promise<void> {
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

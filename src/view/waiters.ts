/**
 * Waiters for a change of one sandbox in the view: the readiness wait of the front doors. A waiter costs a
 * Set entry and a timer while it waits and nothing otherwise; it is released by the next change of its
 * sandbox, by its timeout, by its abort signal, or by close() at shutdown — never by polling.
 */

export type WaitOutcome = 'changed' | 'timeout' | 'busy' | 'closed' | 'aborted';

export interface WaiterLimits {
  /** Waiters allowed for one sandbox at once. */
  readonly perSandbox: number;
  /** Waiters allowed across all sandboxes at once. */
  readonly total: number;
  /**
   * Waiters allowed for the sandboxes of one namespace (one tenant) at once, so that one tenant's flood
   * of waits leaves the others theirs; undefined = no bound of its own (the total bounds it).
   */
  readonly perNamespace?: number | undefined;
}

type Release = (outcome: WaitOutcome) => void;

export class ChangeWaiters {
  private readonly byKey = new Map<string, Set<Release>>();
  /** Waiters per namespace, when that is bounded. */
  private readonly byNamespace = new Map<string, number>();
  private count = 0;
  private closed = false;

  constructor(private readonly limits: WaiterLimits) {}

  get size(): number {
    return this.count;
  }

  /**
   * Resolves when `key` (`<namespace>/<name>`, domain/sandbox.ts's sandboxKey) changes, or with why it did
   * not. Resolves `busy` at once when a limit is reached.
   */
  wait(key: string, timeoutMs: number, signal?: AbortSignal): Promise<WaitOutcome> {
    if (this.closed) return Promise.resolve('closed');
    if (signal?.aborted) return Promise.resolve('aborted');
    let set = this.byKey.get(key);
    if (this.count >= this.limits.total || (set !== undefined && set.size >= this.limits.perSandbox)) {
      return Promise.resolve('busy');
    }
    const perNamespace = this.limits.perNamespace;
    const namespace = perNamespace === undefined ? undefined : key.slice(0, key.indexOf('/'));
    if (namespace !== undefined) {
      const n = this.byNamespace.get(namespace) ?? 0;
      if (n >= perNamespace!) return Promise.resolve('busy');
      this.byNamespace.set(namespace, n + 1);
    }
    if (set === undefined) {
      set = new Set();
      this.byKey.set(key, set);
    }
    const waiters = set;
    this.count++;
    return new Promise<WaitOutcome>((resolve) => {
      const release: Release = (outcome) => {
        if (!waiters.delete(release)) return;
        this.count--;
        if (namespace !== undefined) {
          const n = this.byNamespace.get(namespace)! - 1;
          if (n === 0) this.byNamespace.delete(namespace);
          else this.byNamespace.set(namespace, n);
        }
        if (waiters.size === 0 && this.byKey.get(key) === waiters) this.byKey.delete(key);
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        resolve(outcome);
      };
      const onAbort = (): void => release('aborted');
      const timer = setTimeout(() => release('timeout'), timeoutMs);
      timer.unref();
      signal?.addEventListener('abort', onAbort, { once: true });
      waiters.add(release);
    });
  }

  /** Wakes every waiter of `key`. */
  notify(key: string): void {
    // Every driver update calls this; with nobody waiting (the usual case) it reads no map.
    if (this.byKey.size === 0) return;
    const set = this.byKey.get(key);
    if (set === undefined) return;
    for (const release of [...set]) release('changed');
  }

  /** Releases every waiter (shutdown) and refuses new ones. */
  close(): void {
    this.closed = true;
    for (const set of [...this.byKey.values()]) for (const release of [...set]) release('closed');
  }
}

import type { Logger } from '../observability/logger.js';
import type { SandboxView, ViewEntry } from '../view/sandbox-view.js';

/**
 * Auto-resume: the first request for a paused sandbox whose policy allows it asks the sandbox's driver to
 * resume it — once per sandbox however many requests arrive (single flight) — and the requests wait for
 * it within the readiness wait. A failed resume wakes the waiters at once with the driver's reason.
 */

export type ResumeFn = (driverId: string, namespace: string, name: string) => Promise<void>;

export class Resumer {
  private readonly inflight = new Map<string, Promise<void>>();
  /** Driver resume calls made (metrics and tests). */
  calls = 0;

  constructor(
    private readonly view: SandboxView,
    private readonly resume: ResumeFn,
    private readonly defaultPolicy: boolean,
    private readonly log: Logger,
  ) {
    // A sandbox that left Paused has been resumed (or changed otherwise): the next pause starts afresh.
    view.onChange((key, entry) => {
      if (this.inflight.size > 0 && entry?.status.phase !== 'Paused') this.inflight.delete(key);
    });
  }

  /** Whether traffic may resume this sandbox: its own policy, else the gateway's `--auto-resume`. */
  allows(entry: ViewEntry): boolean {
    return entry.snapshot.resumeOnTraffic ?? this.defaultPolicy;
  }

  /** Starts (or joins) the resume of one sandbox. Rejects with the driver's reason when it fails. */
  trigger(entry: ViewEntry): Promise<void> {
    const key = entry.key;
    let p = this.inflight.get(key);
    if (p !== undefined) return p;
    this.calls++;
    this.log.info({ sandbox: key, driver: entry.driver }, 'resuming a paused sandbox on traffic');
    p = this.resume(entry.driver, entry.namespace, entry.name).catch((err: unknown) => {
      this.log.warn({ sandbox: key, err }, 'resume failed');
      // Let the next request try again, and wake the ones waiting now.
      this.inflight.delete(key);
      queueMicrotask(() => this.view.waiters.notify(key));
      throw err;
    });
    // Waiters observe the failure through their own handler; this one only prevents an unhandled rejection.
    p.catch(() => undefined);
    this.inflight.set(key, p);
    return p;
  }
}

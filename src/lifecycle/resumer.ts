import { SandgateError } from '../domain/errors.js';
import type { Logger } from 'pino';
import type { SandboxView, ViewEntry } from '../view/sandbox-view.js';

/**
 * Auto-resume: the first request for a paused sandbox whose policy allows it asks the sandbox's driver to
 * resume it — once per sandbox however many requests arrive (single flight) — and the requests wait for
 * it within its wake budget. A failed resume wakes the waiters at once with the driver's reason.
 *
 * Checked before the driver is called: a sandbox being deleted (or gone) is never woken (`sandbox_gone`),
 * and neither is one whose namespace already runs `--max-running-per-namespace` sandboxes
 * (`namespace_quota_exceeded`); both reject with that SandgateError and resume nothing.
 */

/** Phases that do not count as running against a namespace's limit. */
const NOT_RUNNING: ReadonlySet<string> = new Set(['Paused', 'Error', 'Deleting']);

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
    /** `--max-running-per-namespace` (0 = no limit). */
    private readonly maxRunningPerNamespace = 0,
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
    const refused = this.refusal(entry);
    if (refused !== undefined) {
      this.log.info({ sandbox: key, code: refused.code }, `not resuming ${key}: ${refused.message}`);
      // The requests waiting on this sandbox learn it at once.
      queueMicrotask(() => this.view.waiters.notify(key));
      return Promise.reject(refused);
    }
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

  /** Why this sandbox must not be woken now, if it must not. */
  private refusal(entry: ViewEntry): SandgateError | undefined {
    const now = this.view.get(entry.namespace, entry.name);
    if (now === undefined || now.snapshot.uid !== entry.snapshot.uid || now.status.phase === 'Deleting' || now.snapshot.state === 'deleting') {
      return new SandgateError('sandbox_gone', `The sandbox ${entry.key} is being deleted or is gone: it is not woken`);
    }
    const max = this.maxRunningPerNamespace;
    if (max <= 0) return undefined;
    let running = 0;
    for (const e of this.view.list()) if (e.namespace === entry.namespace && !NOT_RUNNING.has(e.status.phase)) running++;
    if (running < max) return undefined;
    return new SandgateError('namespace_quota_exceeded', `Namespace ${entry.namespace} already runs ${running} sandboxes (limit ${max}): ${entry.key} is not woken`);
  }
}

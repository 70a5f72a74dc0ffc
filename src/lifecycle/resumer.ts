import { SandgateError } from '../domain/errors.js';
import type { Logger } from 'pino';
import type { ResumeClaims } from './resume-claims.js';
import type { SandboxView, ViewEntry } from '../view/sandbox-view.js';

/**
 * Auto-resume: the first request for a paused sandbox whose policy allows it asks the sandbox's driver to
 * resume it — once per sandbox however many requests arrive (single flight) — and the requests wait for
 * it within its wake budget. A failed resume wakes the waiters at once with the driver's reason.
 *
 * Checked before the driver is called: a sandbox being deleted (or gone) is never woken (`sandbox_gone`),
 * and neither is one whose namespace already runs `--max-running-per-namespace` sandboxes
 * (`namespace_quota_exceeded`); both reject with that SandgateError and resume nothing.
 *
 * The limit counts the sandboxes the view shows running plus the resumes in flight: a wake holds its
 * namespace's slot from the moment it is decided, synchronously, so requests for different paused
 * sandboxes arriving together (HTTP/2 streams in one packet, pipelined requests) cannot all pass the
 * check before the first driver answers. The slot is held until the view shows the sandbox out of Paused,
 * the resume fails, or the claim lapses (`claimMs`: a resume whose driver never reports holds it no
 * longer). With gateways sharing Redis presence, a wake also claims its slot there (`ResumeClaims`)
 * before the driver is called, so the limit holds across gateways too; when that claim cannot be made
 * (Redis unreachable) nothing is woken (`sandbox_resume_failed`).
 */

/** Phases that do not count as running against a namespace's limit. */
const NOT_RUNNING: ReadonlySet<string> = new Set(['Paused', 'Error', 'Deleting']);
/** Shortest time a resume in flight holds its namespace's slot when its driver never reports it. */
export const MIN_RESUME_CLAIM_MS = 30_000;

export type ResumeFn = (driverId: string, namespace: string, name: string) => Promise<void>;

interface Inflight {
  readonly namespace: string;
  /** When the slot lapses (this gateway's clock). */
  readonly lapsesAt: number;
  promise: Promise<void>;
}

export interface ResumerOptions {
  readonly view: SandboxView;
  readonly resume: ResumeFn;
  /** `--auto-resume`: the policy of a sandbox that declares none. */
  readonly defaultPolicy: boolean;
  readonly log: Logger;
  /** `--max-running-per-namespace` (0 = no limit). */
  readonly maxRunningPerNamespace?: number;
  /** The wake budget of a sandbox that declares none (`--readiness-wait-ms`). */
  readonly wakeBudgetMs?: number;
  readonly now?: () => number;
}

export class Resumer {
  private readonly inflight = new Map<string, Inflight>();
  private readonly view: SandboxView;
  private readonly resume: ResumeFn;
  private readonly log: Logger;
  private readonly max: number;
  private readonly wakeBudgetMs: number;
  private readonly now: () => number;
  /** Claims shared with the other gateways (Redis presence); undefined on a gateway of its own. */
  private shared: ResumeClaims | undefined;
  /** Driver resume calls made (metrics and tests). */
  calls = 0;

  constructor(private readonly o: ResumerOptions) {
    this.view = o.view;
    this.resume = o.resume;
    this.log = o.log;
    this.max = o.maxRunningPerNamespace ?? 0;
    this.wakeBudgetMs = o.wakeBudgetMs ?? 0;
    this.now = o.now ?? Date.now;
    // A sandbox that left Paused has been resumed (or changed otherwise): the view counts it from now on,
    // and the next pause starts afresh.
    this.view.onChange((key, entry) => {
      if (this.inflight.size > 0 && entry?.status.phase !== 'Paused') this.inflight.delete(key);
    });
  }

  /** Counts resumes in flight on the other gateways too (called once, when the lifecycle channel is made). */
  shareClaims(claims: ResumeClaims): void {
    this.shared = claims;
  }

  /** Whether traffic may resume this sandbox: its own policy, else the gateway's `--auto-resume`. */
  allows(entry: ViewEntry): boolean {
    return entry.snapshot.resumeOnTraffic ?? this.o.defaultPolicy;
  }

  /** Starts (or joins) the resume of one sandbox. Rejects with the driver's reason when it fails. */
  trigger(entry: ViewEntry): Promise<void> {
    const key = entry.key;
    const now = this.now();
    const held = this.inflight.get(key);
    if (held !== undefined && held.lapsesAt > now) return held.promise;
    if (held !== undefined) this.inflight.delete(key);
    const refused = this.gone(entry) ?? this.overLimit(entry, now);
    if (refused !== undefined) return this.refuse(key, refused);
    const claimMs = Math.max(MIN_RESUME_CLAIM_MS, entry.snapshot.wakeTimeoutMs ?? this.wakeBudgetMs);
    // Held before the first await: the next request, for this sandbox or another of the namespace, sees it.
    const flight: Inflight = { namespace: entry.namespace, lapsesAt: now + claimMs, promise: Promise.resolve() };
    this.inflight.set(key, flight);
    flight.promise = this.wake(entry, claimMs).catch((err: unknown) => {
      if (this.inflight.get(key) === flight) this.inflight.delete(key);
      // The requests waiting on this sandbox learn it at once; the next request may try again.
      queueMicrotask(() => this.view.waiters.notify(key));
      throw err;
    });
    // Waiters observe the failure through their own handler; this one only prevents an unhandled rejection.
    flight.promise.catch(() => undefined);
    return flight.promise;
  }

  /** Claims the cluster-wide slot (when shared), then asks the driver; gives the claim back if that fails. */
  private async wake(entry: ViewEntry, claimMs: number): Promise<void> {
    const key = entry.key;
    let token: string | undefined;
    if (this.max > 0 && this.shared !== undefined) {
      const running = this.running(entry.namespace);
      let reply;
      try {
        reply = await this.shared.claim(entry.namespace, key, running, this.max, claimMs);
      } catch (err) {
        this.log.warn({ sandbox: key, err }, 'cannot count resumes in flight across gateways: not resuming');
        throw new SandgateError('sandbox_resume_failed', `resumes in flight cannot be counted across gateways (${err instanceof Error ? err.message : String(err)})`, { cause: err });
      }
      if (!reply.ok) {
        const refused = this.quotaError(entry, reply.counted);
        this.log.info({ sandbox: key, code: refused.code }, `not resuming ${key}: ${refused.message}`);
        throw refused;
      }
      token = reply.token;
    }
    this.calls++;
    this.log.info({ sandbox: key, driver: entry.driver }, 'resuming a paused sandbox on traffic');
    try {
      await this.resume(entry.driver, entry.namespace, entry.name);
    } catch (err) {
      this.log.warn({ sandbox: key, err }, 'resume failed');
      if (token !== undefined) await this.shared?.release(entry.namespace, key, token).catch((e: unknown) => this.log.debug({ sandbox: key, err: e }, 'resume claim not released; it lapses'));
      throw err;
    }
  }

  private refuse(key: string, refused: SandgateError): Promise<never> {
    this.log.info({ sandbox: key, code: refused.code }, `not resuming ${key}: ${refused.message}`);
    // The requests waiting on this sandbox learn it at once.
    queueMicrotask(() => this.view.waiters.notify(key));
    return Promise.reject(refused);
  }

  private gone(entry: ViewEntry): SandgateError | undefined {
    const now = this.view.get(entry.namespace, entry.name);
    if (now === undefined || now.snapshot.uid !== entry.snapshot.uid || now.status.phase === 'Deleting' || now.snapshot.state === 'deleting') {
      return new SandgateError('sandbox_gone', `The sandbox ${entry.key} is being deleted or is gone: it is not woken`);
    }
    return undefined;
  }

  /** The namespace's running sandboxes plus this gateway's resumes in flight, against the limit. */
  private overLimit(entry: ViewEntry, now: number): SandgateError | undefined {
    if (this.max <= 0) return undefined;
    let counted = this.running(entry.namespace).length;
    for (const f of this.inflight.values()) if (f.namespace === entry.namespace && f.lapsesAt > now) counted++;
    return counted < this.max ? undefined : this.quotaError(entry, counted);
  }

  private running(namespace: string): string[] {
    const out: string[] = [];
    for (const e of this.view.list()) if (e.namespace === namespace && !NOT_RUNNING.has(e.status.phase)) out.push(e.key);
    return out;
  }

  private quotaError(entry: ViewEntry, counted: number): SandgateError {
    return new SandgateError('namespace_quota_exceeded', `Namespace ${entry.namespace} already runs or is waking ${counted} sandboxes (limit ${this.max}): ${entry.key} is not woken`);
  }
}

import { formatDuration } from '../domain/duration.js';
import { SandgateError } from '../domain/errors.js';
import type { Logger } from 'pino';
import type { ActivityLog } from './activity-log.js';
import type { ActivityDemand } from './activity-recorder.js';
import type { LifecycleChannel } from './lifecycle-channel.js';
import type { IdleNote, PauseResult } from '../domain/sandbox.js';
import type { SandboxView, ViewEntry } from '../view/sandbox-view.js';

/**
 * Idle pause (docs/lifecycle.md), beside the resumer: a Ready sandbox with no traffic for its idle timeout
 * (its own `idleTimeout`, else `--idle-timeout`; 0 = never) is paused through its driver. Only the
 * lifecycle writer decides (one gateway of the cluster: lifecycle-channel.ts), and each sandbox is asked
 * once: it stays marked until it leaves Ready. A sandbox being updated (phase Updating, or a template
 * revision not yet rolled out) is left alone. A driver that cannot pause is reported as unsupported and
 * not asked again. Each decision is logged and kept for the API and the console.
 */

export type PauseFn = (driverId: string) => ((namespace: string, name: string) => Promise<void>) | undefined;

export interface IdleControllerOptions {
  readonly view: SandboxView;
  readonly activity: ActivityLog;
  readonly channel: LifecycleChannel;
  readonly pause: PauseFn;
  /** `--idle-timeout` in ms; 0 = off for sandboxes without their own. */
  readonly defaultTimeoutMs: number;
  /**
   * Added to every timeout before pausing: with several gateways, a peer's activity reaches the writer up
   * to one report interval late.
   */
  readonly graceMs: number;
  /** How often sandboxes are checked. */
  readonly checkMs: number;
  readonly now: () => number;
  readonly log: Logger;
  readonly counted?: (result: PauseResult) => void;
  /** Told whether the view holds sandboxes with an idle timeout of their own (activity-recorder.ts). */
  readonly demand: ActivityDemand;
}

export class IdleController {
  /** Sandboxes asked to pause and not yet out of Ready, with the pause call (settled or not). */
  private readonly pausing = new Map<string, Promise<void>>();
  /** Drivers that cannot pause. */
  private readonly unsupported = new Set<string>();
  /** Sandboxes with an idle timeout of their own (checked even when `--idle-timeout` is off). */
  private readonly ownTimeouts = new Set<string>();
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly o: IdleControllerOptions) {
    // The view may hold sandboxes already (the controller may start after the drivers).
    for (const e of o.view.list()) if ((e.snapshot.idleTimeoutMs ?? 0) > 0) this.ownTimeouts.add(e.key);
    o.demand.setOwnTimeouts(this.ownTimeouts.size > 0);
    o.view.onChange((key, entry) => {
      if (entry === undefined || entry.status.phase !== 'Ready') this.pausing.delete(key);
      const had = this.ownTimeouts.size > 0;
      if (entry !== undefined && (entry.snapshot.idleTimeoutMs ?? 0) > 0) this.ownTimeouts.add(key);
      else this.ownTimeouts.delete(key);
      if (had !== this.ownTimeouts.size > 0) o.demand.setOwnTimeouts(!had);
    });
  }

  /** The idle timeout that applies to a sandbox (ms; 0 = never). */
  timeoutOf(e: ViewEntry): number {
    return e.snapshot.idleTimeoutMs ?? this.o.defaultTimeoutMs;
  }

  start(): void {
    this.timer = setInterval(() => void this.check(), this.o.checkMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** One pass over the Ready sandboxes (the timer's; tests call it directly). Resolves when the pauses it asked for have settled. */
  async check(): Promise<void> {
    if (!this.o.channel.isWriter()) return;
    if (this.o.defaultTimeoutMs <= 0 && this.ownTimeouts.size === 0) return;
    const asked: Promise<void>[] = [];
    const activity = this.o.activity;
    const now = this.o.now();
    const keys = this.o.defaultTimeoutMs > 0 ? [...activity.idle()].map(([k]) => k) : [...this.ownTimeouts];
    for (const key of keys) {
      const asking = this.pausing.get(key);
      if (asking !== undefined) {
        // Asked already (by an earlier check): this pass settles with it too.
        asked.push(asking);
        continue;
      }
      const since = activity.idleSince(key);
      if (since === undefined) continue;
      const slash = key.indexOf('/');
      const e = this.o.view.get(key.slice(0, slash), key.slice(slash + 1));
      if (e === undefined || e.status.phase !== 'Ready') continue;
      const timeout = this.timeoutOf(e);
      if (timeout <= 0 || now - since < timeout + this.o.graceMs) continue;
      const rev = e.snapshot.revision;
      if (rev !== undefined && rev.desired !== rev.current) continue;
      const p = this.pauseIdle(e, now - since, timeout, now);
      if (p !== undefined) asked.push(p);
    }
    await Promise.all(asked);
  }

  private pauseIdle(e: ViewEntry, idleMs: number, timeoutMs: number, now: number): Promise<void> | undefined {
    const key = e.key;
    const log = this.o.log;
    const activity = this.o.activity;
    const pause = this.unsupported.has(e.driver) ? undefined : this.o.pause(e.driver);
    if (pause === undefined) {
      if (activity.noteOf(key)?.decision !== 'unsupported') {
        if (!this.unsupported.has(e.driver)) log.warn({ driver: e.driver }, `driver ${e.driver} cannot pause sandboxes: idle pause is unsupported for its sandboxes`);
        this.unsupported.add(e.driver);
        this.note(key, { decision: 'unsupported', reason: `idle for ${formatDuration(idleMs)}, but driver ${e.driver} cannot pause sandboxes`, at: now }, 'unsupported');
      }
      return undefined;
    }
    const reason = `no traffic for ${formatDuration(idleMs)} (idle timeout ${formatDuration(timeoutMs)})`;
    log.info({ sandbox: key, driver: e.driver, idleMs, idleTimeoutMs: timeoutMs }, `pausing idle sandbox ${key}: ${reason}`);
    // Called a microtask later, so the mark below is in place before a driver that reports the pause at
    // once makes the sandbox leave Ready (which clears the mark).
    const asking = Promise.resolve()
      .then(() => pause(e.namespace, e.name))
      .then(
      () => this.note(key, { decision: 'paused', reason, at: now }, 'paused'),
      (err: unknown) => {
        this.pausing.delete(key);
        if (err instanceof SandgateError && err.code === 'driver_unsupported') {
          this.unsupported.add(e.driver);
          log.warn({ driver: e.driver, err }, `driver ${e.driver} cannot pause sandboxes: idle pause is unsupported for its sandboxes`);
          this.note(key, { decision: 'unsupported', reason: `driver ${e.driver} cannot pause sandboxes: ${err.message}`, at: now }, 'unsupported');
          return;
        }
        // Tried again after another full timeout, not on every check.
        activity.restartIdle(key, this.o.now());
        log.warn({ sandbox: key, driver: e.driver, err }, `pausing idle sandbox ${key} failed`);
        this.note(key, { decision: 'failed', reason: `pause failed: ${err instanceof Error ? err.message : String(err)}`, at: now }, 'failed');
      },
    );
    this.pausing.set(key, asking);
    return asking;
  }

  private note(key: string, n: IdleNote, result: PauseResult): void {
    if (this.o.view.get(key.slice(0, key.indexOf('/')), key.slice(key.indexOf('/') + 1)) !== undefined) this.o.activity.note(key, n);
    this.o.counted?.(result);
  }
}

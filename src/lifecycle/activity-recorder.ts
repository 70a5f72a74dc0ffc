import type { Allow } from '../domain/decide.js';
import { SandgateError } from '../domain/errors.js';
import type { ActivityLog } from './activity-log.js';

/**
 * The doors' side of activity tracking (activity-log.ts): an allowed request counts unless its path
 * matches `--activity-ignore` (health checks and the like), and bytes on an open stream count as they
 * pass (data frames only on a WebSocket: forwarding/ws-frames.ts). One call per request, no I/O.
 */

/**
 * `--activity-ignore` patterns as one anchored expression over a request's path (its query ignored):
 * `*` matches any run of characters within the path; everything else matches itself. Throws
 * `config_invalid` for a pattern that is not a path.
 */
export function ignorePattern(patterns: readonly string[]): RegExp | undefined {
  if (patterns.length === 0) return undefined;
  const parts = patterns.map((p) => {
    if (!p.startsWith('/') || /[\s?#]/.test(p)) throw new SandgateError('config_invalid', `activity-ignore: ${JSON.stringify(p)} is not a path pattern (write e.g. /healthz or /api/health*)`);
    return p.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '[^?#]*');
  });
  return new RegExp(`^(?:${parts.join('|')})(?:[?#]|$)`);
}

/**
 * Whether anything reads activity (docs/lifecycle.md): an idle timeout (`--idle-timeout`, or a sandbox's
 * own), reports to drivers, the console's activity column, `--metrics-namespaces`. While nothing does,
 * the doors record nothing and no gateway takes the lifecycle writer's lock.
 */
export class ActivityDemand {
  /** Read by the doors on every allowed request. */
  recording: boolean;
  private ownTimeouts = false;

  constructor(
    private readonly fixed: {
      /** `--idle-timeout` is set. */
      readonly idle: boolean;
      /** A driver takes activity reports and `--activity-patch-interval-ms` is not 0. */
      readonly reports: boolean;
      /** The console or `--metrics-namespaces` shows it. */
      readonly shown: boolean;
    },
  ) {
    this.recording = this.writerWork() || fixed.shown;
  }

  /** Whether the view holds sandboxes with an idle timeout of their own (the idle controller says). */
  setOwnTimeouts(any: boolean): void {
    this.ownTimeouts = any;
    this.recording = this.writerWork() || this.fixed.shown;
  }

  /** Whether the lifecycle writer has anything to do: pause idle sandboxes or report to drivers. */
  writerWork(): boolean {
    return this.fixed.idle || this.fixed.reports || this.ownTimeouts;
  }
}

export class ActivityRecorder {
  constructor(
    private readonly log: ActivityLog,
    private readonly demand: ActivityDemand,
    private readonly ignore: RegExp | undefined,
    private readonly now: () => number,
  ) {}

  /** An allowed request through any door; `path` as received (a path-routed request's rest when it has one). */
  request(d: Allow, path: string | undefined): void {
    if (!this.demand.recording) return;
    if (this.ignore !== undefined && path !== undefined && this.ignore.test(path)) return;
    this.log.touch(d.entry.key, d.target.port, this.now());
  }

  /** Bytes on an open stream (a response body, a tunnelled WebSocket's data frames). */
  stream(d: Allow): void {
    if (this.demand.recording) this.log.touch(d.entry.key, d.target.port, this.now());
  }
}

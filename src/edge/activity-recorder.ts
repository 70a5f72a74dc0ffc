import type { Allow } from '../domain/decide.js';
import { SandgateError } from '../domain/errors.js';
import type { ActivityLog } from '../view/activity.js';

/**
 * The doors' side of activity tracking (view/activity.ts): an allowed request counts unless its path
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

export class ActivityRecorder {
  constructor(
    private readonly log: ActivityLog,
    private readonly ignore: RegExp | undefined,
    private readonly now: () => number,
  ) {}

  /** An allowed request through any door; `path` as received (a path-routed request's rest when it has one). */
  request(d: Allow, path: string | undefined): void {
    if (this.ignore !== undefined && path !== undefined && this.ignore.test(path)) return;
    this.log.touch(d.entry.key, d.target.port, this.now());
  }

  /** Bytes on an open stream (a response body, a tunnelled WebSocket's data frames). */
  stream(d: Allow): void {
    this.log.touch(d.entry.key, d.target.port, this.now());
  }
}

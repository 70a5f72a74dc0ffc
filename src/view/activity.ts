import type { ActivityRecord } from '../domain/sandbox.js';

/**
 * Traffic activity per sandbox and port, in memory: when each was last used through any door of any
 * gateway. The doors write it on the hot path (touch(): two map reads and at most two writes, no I/O,
 * nothing allocated for a sandbox and port already seen); a timer drains what this gateway saw and
 * publishes it to its peers (merge() takes theirs), and the idle controller and the drivers' reports read
 * it. The idle controller's latest decision per sandbox is kept beside it, for the API and the console.
 */

/** One sandbox's activity. */
export interface SandboxActivity {
  /** Epoch ms of the last activity on any port. */
  last: number;
  /** Port → epoch ms of its last activity. */
  readonly ports: Map<number, number>;
  /** True when this gateway saw activity since the last drain. */
  local: boolean;
}

/** The idle controller's decision about one sandbox (docs/lifecycle.md). */
export interface IdleNote {
  readonly decision: 'paused' | 'unsupported' | 'failed' | 'skipped';
  readonly reason: string;
  /** Epoch ms of the decision. */
  readonly at: number;
}

export class ActivityLog {
  /** `--idle-timeout` in ms (0 = off): the timeout of sandboxes without their own. Set by the wiring. */
  defaultIdleTimeoutMs = 0;
  private readonly byKey = new Map<string, SandboxActivity>();
  private readonly notes = new Map<string, IdleNote>();
  /** Epoch ms each Ready sandbox became Ready (seen by this gateway): idle time starts there without traffic. */
  private readonly ready = new Map<string, number>();
  /** Keys with local activity since the last drain. */
  private readonly fresh = new Set<string>();

  /** Records activity now (the hot path). `key` is the view entry's `<namespace>/<name>`. */
  touch(key: string, port: number, now: number): void {
    const a = this.merge(key, port, now);
    if (!a.local) {
      a.local = true;
      this.fresh.add(key);
    }
  }

  /** Takes a peer's report (and this gateway's own, from touch()): later times win, nothing goes back out. */
  merge(key: string, port: number, at: number): SandboxActivity {
    let a = this.byKey.get(key);
    if (a === undefined) {
      a = { last: at, ports: new Map(), local: false };
      this.byKey.set(key, a);
    } else if (at > a.last) a.last = at;
    const p = a.ports.get(port);
    if (p === undefined || at > p) a.ports.set(port, at);
    return a;
  }

  get(key: string): SandboxActivity | undefined {
    return this.byKey.get(key);
  }

  /** Epoch ms of the sandbox's last activity, undefined when none was seen. */
  last(key: string): number | undefined {
    return this.byKey.get(key)?.last;
  }

  /** What this gateway saw since the last drain, one record per sandbox port, and forgets that it was fresh. */
  drainLocal(): ActivityRecord[] {
    const out: ActivityRecord[] = [];
    for (const key of this.fresh) {
      const a = this.byKey.get(key);
      if (a === undefined) continue;
      a.local = false;
      const slash = key.indexOf('/');
      const namespace = key.slice(0, slash);
      const name = key.slice(slash + 1);
      for (const [port, at] of a.ports) out.push({ namespace, name, port, at });
    }
    this.fresh.clear();
    return out;
  }

  /** The view's phase of the sandbox changed (Ready or not), at `now`. */
  readyChanged(key: string, ready: boolean, now: number): void {
    if (!ready) this.ready.delete(key);
    else if (!this.ready.has(key)) this.ready.set(key, now);
  }

  /** Epoch ms a Ready sandbox became Ready (as this gateway saw it); undefined when not Ready. */
  readySince(key: string): number | undefined {
    return this.ready.get(key);
  }

  /** Epoch ms since which a Ready sandbox has been idle (its last activity or becoming Ready); undefined when not Ready. */
  idleSince(key: string): number | undefined {
    const since = this.ready.get(key);
    if (since === undefined) return undefined;
    const last = this.byKey.get(key)?.last;
    return last !== undefined && last > since ? last : since;
  }

  /** Restarts a sandbox's idle time (a pause that failed is tried again only after another full timeout). */
  restartIdle(key: string, now: number): void {
    if (this.ready.has(key)) this.ready.set(key, now);
  }

  /** Keys of the Ready sandboxes and the epoch ms since which each has been idle. */
  *idle(): IterableIterator<[string, number]> {
    for (const key of this.ready.keys()) yield [key, this.idleSince(key)!];
  }

  note(key: string, n: IdleNote): void {
    this.notes.set(key, n);
  }

  noteOf(key: string): IdleNote | undefined {
    return this.notes.get(key);
  }

  /** The sandbox left the view: its activity and notes go with it. */
  forget(key: string): void {
    this.byKey.delete(key);
    this.notes.delete(key);
    this.fresh.delete(key);
    this.ready.delete(key);
  }

  *entries(): IterableIterator<[string, SandboxActivity]> {
    yield* this.byKey;
  }
}

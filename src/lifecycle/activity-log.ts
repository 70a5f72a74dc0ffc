import type { ActivityReadout, ActivityRecord, IdleNote, SandboxActivity } from '../domain/sandbox.js';
import type { SandboxView } from '../view/sandbox-view.js';

/**
 * Traffic activity per sandbox and port, in memory: when each was last used through any door of any
 * gateway. The doors write it on the hot path (touch(): two map reads and at most two writes, no I/O,
 * nothing allocated for a sandbox and port already seen); a timer drains what this gateway saw and
 * publishes it to its peers (merge() takes theirs), and the idle controller and the drivers' reports read
 * it. The idle controller's latest decision per sandbox is kept beside it, for the API and the console.
 * When a sandbox became Ready is the view's (readySince): idle time starts there without traffic.
 */
export class ActivityLog implements ActivityReadout {
  private readonly byKey = new Map<string, SandboxActivity>();
  private readonly notes = new Map<string, IdleNote>();
  /** Keys with local activity since the last drain. */
  private readonly fresh = new Set<string>();
  /** Epoch ms an idle time was restarted at (a pause that failed). */
  private readonly restarted = new Map<string, number>();

  constructor(
    private readonly view: SandboxView,
    /** `--idle-timeout` in ms (0 = off): the timeout of sandboxes without their own. */
    readonly defaultIdleTimeoutMs: number,
  ) {
    // A sandbox that left the view takes its activity and notes with it.
    view.onChange((key, entry) => {
      if (entry === undefined) this.forget(key);
    });
  }

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

  /** Epoch ms since which a Ready sandbox has been idle (its last activity or becoming Ready); undefined when not Ready. */
  idleSince(key: string): number | undefined {
    const since = this.view.readySince(key);
    return since === undefined ? undefined : this.idleFrom(key, since);
  }

  /** Keys of the Ready sandboxes and the epoch ms since which each has been idle. */
  *idle(): IterableIterator<[string, number]> {
    for (const [key, since] of this.view.readyEntries()) yield [key, this.idleFrom(key, since)];
  }

  /** Restarts a sandbox's idle time (a pause that failed is tried again only after another full timeout). */
  restartIdle(key: string, now: number): void {
    this.restarted.set(key, now);
  }

  note(key: string, n: IdleNote): void {
    this.notes.set(key, n);
  }

  noteOf(key: string): IdleNote | undefined {
    return this.notes.get(key);
  }

  *entries(): IterableIterator<[string, SandboxActivity]> {
    yield* this.byKey;
  }

  private idleFrom(key: string, readySince: number): number {
    const last = this.byKey.get(key)?.last ?? 0;
    return Math.max(readySince, last, this.restarted.get(key) ?? 0);
  }

  private forget(key: string): void {
    this.byKey.delete(key);
    this.notes.delete(key);
    this.fresh.delete(key);
    this.restarted.delete(key);
  }
}

import { realpathSync, statSync, watch, type FSWatcher } from 'node:fs';
import { dirname } from 'node:path';

/**
 * The one way sandgate follows files on disk: the file driver's sandboxes file, the API key file, the
 * link keys file, the supervisor secret file and the TLS certificate pairs.
 *
 * The directory holding each file is watched, never the file, and any event there counts: editors replace
 * a file by a rename, and Kubernetes updates a mounted Secret or ConfigMap by writing a new timestamped
 * directory and renaming a `..data` symlink over the old one — the file's own name (`tls.crt ->
 * ..data/tls.crt`) sees no event at all. After a burst of events has been quiet for `debounceMs`, every
 * path is compared with what was seen last: where its symlinks lead (realpath), and the inode, size and
 * modification time of what they lead to. `onChange` runs only when one of those moved, so events about
 * neighbouring files cost a few `stat` calls and no re-read. A periodic check (`pollMs`) backs the watch up
 * on filesystems whose events go missing (some network and overlay mounts).
 *
 * Keeping the last good content when a re-read fails is the caller's part: it knows what good means.
 */
export interface FileWatch {
  /** Compares the files now, as an event would; true when `onChange` ran. */
  check(): boolean;
  close(): void;
}

export interface FileWatchOptions {
  /**
   * The paths to follow, asked again after every change (a directory of certificate pairs gains and loses
   * files). A directory among them is watched itself, and its entries being added or removed is a change.
   */
  readonly paths: () => readonly string[];
  readonly onChange: () => void;
  /** A directory that cannot be watched (the periodic check still covers it). */
  readonly onError: (err: Error) => void;
  /** Quiet time after the last event before comparing (a rotation writes several files). */
  readonly debounceMs?: number;
  /** Compare every this many ms even without an event; 0: only on events. */
  readonly pollMs?: number;
}

/** Follows the paths from now on: what they are now is the baseline a later change is measured against. */
export function watchFiles(opts: FileWatchOptions): FileWatch {
  return new Watch(opts);
}

/** Shorthand for one file. */
export function watchFile(path: string, onChange: () => void, onError: (err: Error) => void, debounceMs = 50): FileWatch {
  return watchFiles({ paths: () => [path], onChange, onError, debounceMs });
}

class Watch implements FileWatch {
  private seen: string;
  private readonly watchers = new Map<string, FSWatcher>();
  private timer: NodeJS.Timeout | undefined;
  private readonly poll: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(private readonly opts: FileWatchOptions) {
    const paths = opts.paths();
    this.seen = fingerprint(paths);
    this.rewatch(paths);
    const pollMs = opts.pollMs ?? 10_000;
    if (pollMs > 0) {
      this.poll = setInterval(() => this.check(), pollMs);
      this.poll.unref();
    }
  }

  check(): boolean {
    if (this.closed) return false;
    const paths = this.opts.paths();
    const now = fingerprint(paths);
    if (now === this.seen) return false;
    this.seen = now;
    this.opts.onChange();
    // The change may have added or removed files (a pair in a certificate directory): follow the new set.
    // Paths followed before keep the baseline taken before `onChange`, which may re-read them later.
    const after = this.opts.paths();
    if (after.join('\n') !== paths.join('\n')) {
      this.seen = fingerprint(after);
      this.rewatch(after);
    }
    return true;
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.timer);
    clearInterval(this.poll);
    for (const w of this.watchers.values()) w.close();
    this.watchers.clear();
  }

  private event(): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.check(), this.opts.debounceMs ?? 50);
  }

  /** Watches the directory of every path (and every path that is a directory), and no other. */
  private rewatch(paths: readonly string[]): void {
    const dirs = new Set<string>();
    for (const p of paths) {
      dirs.add(dirname(p));
      if (isDirectory(p)) dirs.add(p);
    }
    for (const [dir, w] of this.watchers) {
      if (dirs.has(dir)) continue;
      w.close();
      this.watchers.delete(dir);
    }
    for (const dir of dirs) {
      if (this.watchers.has(dir)) continue;
      try {
        const w = watch(dir, () => this.event());
        w.on('error', (err) => this.opts.onError(err));
        this.watchers.set(dir, w);
      } catch (err) {
        this.opts.onError(new Error(`cannot watch ${dir}: ${(err as Error).message}; re-checking it periodically`, { cause: err }));
      }
    }
  }
}

/** What each path resolves to now, as one comparable string. */
function fingerprint(paths: readonly string[]): string {
  return paths.map(identity).join('\n');
}

function identity(path: string): string {
  try {
    // statSync follows every symlink; realpath says which timestamped directory they lead into.
    const s = statSync(path, { bigint: true });
    return `${path} ${realpathSync(path)} ${s.dev}:${s.ino} ${s.size} ${s.mtimeNs} ${s.ctimeNs}`;
  } catch (err) {
    return `${path} ${(err as NodeJS.ErrnoException).code ?? 'unreadable'}`;
  }
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

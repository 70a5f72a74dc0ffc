import { readFile } from 'node:fs/promises';
import { watchFiles, type FileWatch } from '../lib/file-watch.js';
import { parseSupervisorKeys, type SupervisorKeys } from './supervisor-token.js';

/**
 * Reloads the supervisor key set from `--supervisor-secret-file` at runtime, so rotating a key out of the
 * file closes the sessions it signed (SupervisorServer.setKeys). The file is followed by the one file
 * watch (a mounted Secret's `..data` swap included) and compared every heartbeat interval as well, so the
 * delay is bounded on every filesystem. A file that does not read or parse is reported and the last good
 * key set stays.
 */

export interface SupervisorKeyFileOptions {
  readonly path: string;
  readonly audience: string;
  /** The key set the gateway started with (the file's content then). */
  readonly initial: SupervisorKeys;
  readonly onChange: (keys: SupervisorKeys) => void;
  readonly onError: (err: Error) => void;
}

export class SupervisorKeyFile {
  /** The text last parsed: an unchanged file is not parsed again. */
  private last: string | undefined;
  private watch: FileWatch | undefined;
  private checking: Promise<boolean> | undefined;
  /** A check was asked for while one was reading. */
  private again = false;
  private keys: SupervisorKeys;

  constructor(private readonly opts: SupervisorKeyFileOptions) {
    this.keys = opts.initial;
  }

  get current(): SupervisorKeys {
    return this.keys;
  }

  /** Follows the file: on a change seen, and at least every `intervalMs`. */
  start(intervalMs: number): void {
    this.watch = watchFiles({ paths: () => [this.opts.path], onChange: () => void this.check(), onError: this.opts.onError, pollMs: intervalMs });
    // A change since the key set was first read is not lost.
    void this.check();
  }

  stop(): void {
    this.watch?.close();
    this.watch = undefined;
  }

  /**
   * Re-reads the file now; resolves true when the key set changed. One read at a time: a check asked for
   * while one is reading reads again after it, since that read may have begun before the change it is
   * told of (the watch reports each change once).
   */
  check(): Promise<boolean> {
    if (this.checking !== undefined) {
      this.again = true;
      return this.checking;
    }
    this.checking = this.read().finally(() => {
      this.checking = undefined;
      if (!this.again) return;
      this.again = false;
      void this.check();
    });
    return this.checking;
  }

  private async read(): Promise<boolean> {
    let text: string;
    try {
      text = await readFile(this.opts.path, 'utf8');
    } catch (err) {
      this.opts.onError(new Error(`cannot read supervisor secret file ${this.opts.path}: ${(err as Error).message}; keeping the current keys`, { cause: err }));
      return false;
    }
    if (text === this.last) return false;
    let keys: SupervisorKeys;
    try {
      keys = { keys: parseSupervisorKeys(text, this.opts.path), audience: this.opts.audience };
    } catch (err) {
      // No cause attached: the message of parseSupervisorKeys is safe to log, what it wraps need not be.
      this.opts.onError(new Error(`${(err as Error).message}; keeping the current keys`));
      return false;
    }
    this.last = text;
    if (sameKeys(keys, this.keys)) return false;
    this.keys = keys;
    this.opts.onChange(keys);
    return true;
  }
}

function sameKeys(a: SupervisorKeys, b: SupervisorKeys): boolean {
  return (
    a.audience === b.audience &&
    a.keys.length === b.keys.length &&
    a.keys.every((k, i) => k.kid === b.keys[i]!.kid && Buffer.compare(Buffer.from(k.secret), Buffer.from(b.keys[i]!.secret)) === 0)
  );
}

import { SandgateError } from '../../domain/errors.js';
import { watchFiles, type FileWatch } from '../file-watch.js';
import { CertificateSet, type CertificateSource, type ReloadEvent } from './certificate-set.js';

export type { CertificateSource, ReloadEvent } from './certificate-set.js';
export { CertificateSet } from './certificate-set.js';

/**
 * The one certificate store every TLS listener is handed (the proxy, the supervisor endpoint, the doors,
 * the ops port, the relay's peer connections). It holds named sets of pairs — say the proxy's `--tls-dir`
 * chosen by SNI, and the doors' pair with the CA their clients must present — and a listener asks for
 * its set by name. All their files are followed by one file watch (lib/file-watch.ts) and re-read when
 * they change — a cert-manager Secret update swaps the `..data` symlink of a mounted volume; problems
 * of every set are reported in one place.
 */

/** One set's source and, for mutual TLS, the CA (PEM) its clients' certificates must chain to. */
export interface CertificateSetSpec {
  readonly from: CertificateSource;
  readonly clientCa?: Buffer;
}

export interface CertificateStoreOptions {
  /** Quiet time after a file change before re-reading (a rotation writes several files). */
  readonly debounceMs?: number;
  /** Compare the files every this many ms even without an event (0 = only on events). */
  readonly pollMs?: number;
  readonly onReload?: (e: ReloadEvent) => void;
  /** Clock (epoch ms), for expiry. */
  readonly now?: () => number;
}

export class CertificateStore {
  private readonly sets = new Map<string, CertificateSet>();
  private watch: FileWatch | undefined;

  /** Loads every set now; throws `tls_certificate_invalid` when a set has no pair that loads. */
  constructor(
    specs: Readonly<Record<string, CertificateSetSpec>>,
    private readonly opts: CertificateStoreOptions = {},
  ) {
    const now = opts.now ?? Date.now;
    for (const [name, spec] of Object.entries(specs)) {
      const set = new CertificateSet(spec.from, { now, onReload: opts.onReload, clientCa: spec.clientCa });
      const why = set.loadFailure();
      if (why !== undefined) throw new SandgateError('tls_certificate_invalid', `no TLS certificate could be loaded: ${why}`);
      this.sets.set(name, set);
    }
  }

  /** The named set; throws when the store has none by that name (a wiring mistake). */
  set(name: string): CertificateSet {
    const set = this.sets.get(name);
    if (set === undefined) throw new Error(`the certificate store has no set ${JSON.stringify(name)}`);
    return set;
  }

  has(name: string): boolean {
    return this.sets.has(name);
  }

  /** Starts following every set's files; a change since they were loaded is read now. */
  start(): void {
    this.watch = watchFiles({
      paths: () => [...this.sets.values()].flatMap((s) => s.followed()),
      onChange: () => this.reload(),
      onError: (err) => {
        for (const s of this.sets.values()) s.fail('dir' in s.from ? s.from.dir : s.from.certFile, err);
      },
      debounceMs: this.opts.debounceMs ?? 100,
      pollMs: this.opts.pollMs ?? 10_000,
    });
    this.reload();
  }

  close(): void {
    this.watch?.close();
    this.watch = undefined;
    for (const s of this.sets.values()) s.detachAll();
  }

  /** Re-reads every set (unchanged files keep their pairs). */
  reload(): void {
    for (const s of this.sets.values()) s.reload();
  }

  /** What an operator must know (readiness's degraded reasons): pairs that failed to reload, expired ones. */
  problems(): string[] {
    return [...this.sets.values()].flatMap((s) => s.problems());
  }
}

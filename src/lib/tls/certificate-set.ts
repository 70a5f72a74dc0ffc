import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { SecureContext, Server as TlsServer, TlsOptions } from 'node:tls';
import { loadPair, selectPair, TLS_DEFAULTS, type CertificatePair } from './certificate-pair.js';

/**
 * One set of certificate pairs in the certificate store (certificate-store.ts): either one pair (a
 * certificate file and its key) or a directory of pairs chosen by SNI. A pair whose new files do not load
 * keeps serving its last good certificate, and the failure is reported until a later read succeeds.
 *
 * A directory holds pairs as `<name>.crt` + `<name>.key` files, or as sub-directories holding `tls.crt` +
 * `tls.key` (one mounted Kubernetes TLS Secret each). A client that sends no SNI, or a name no pair
 * covers, gets the pair named `default`, else the first pair by name.
 */

/** Where the pairs come from. */
export type CertificateSource = { readonly certFile: string; readonly keyFile: string } | { readonly dir: string };

/** What happened at a re-read, for the log and the metrics. */
export interface ReloadEvent {
  readonly source: string;
  readonly result: 'loaded' | 'failed' | 'removed';
  readonly error?: Error;
}

/** What a set shares with the store it belongs to. */
export interface CertificateSetOptions {
  readonly onReload?: (e: ReloadEvent) => void;
  /** Clock (epoch ms), for expiry. */
  readonly now: () => number;
  /** Mutual TLS: only clients with a certificate this CA (PEM) issued complete the handshake. */
  readonly clientCa?: Buffer;
}

interface PairFiles {
  readonly source: string;
  readonly certFile: string;
  readonly keyFile: string;
}

const FLAT_CERT = /^([^.][^/]*)\.crt$/;

export class CertificateSet {
  private pairs: CertificatePair[] = [];
  /** Sources whose files do not load now (their last good pair, if any, still serves), with why. */
  private readonly failing = new Map<string, string>();
  private readonly servers = new Set<TlsServer>();

  /** Loads the pairs now; `loadFailure` says why when none loaded. */
  constructor(
    readonly from: CertificateSource,
    private readonly opts: CertificateSetOptions,
  ) {
    this.reload();
  }

  /** Why no pair loaded (nothing could be served); undefined when one did. */
  loadFailure(): string | undefined {
    if (this.pairs.length > 0) return undefined;
    const from = this.from;
    return [...this.failing].map(([source, e]) => `${source}: ${e}`).join('; ') || ('dir' in from ? `${from.dir} holds no <name>.crt + <name>.key pair and no sub-directory with tls.crt + tls.key` : 'no pair');
  }

  /** The pairs served now, in name order. */
  get current(): readonly CertificatePair[] {
    return this.pairs;
  }

  /** The CA client certificates are verified against (mutual TLS); undefined without one. */
  get clientCa(): Buffer | undefined {
    return this.opts.clientCa;
  }

  /** The pair for a client that sends no SNI or a name no pair covers. */
  get fallback(): CertificatePair {
    return this.pairs.find((p) => p.source === 'default') ?? this.pairs[0]!;
  }

  /** The secure context for an SNI name. */
  contextFor(servername: string): SecureContext {
    return (selectPair(this.pairs, servername) ?? this.fallback).context;
  }

  /**
   * Options for a TLS (or HTTP/2 secure) server: the modern defaults, the fallback pair, SNI selection, and
   * with a client CA the client certificate requirement (unless `clientAuth` is false). Pass the server
   * to `attach` so a reloaded fallback reaches it.
   */
  serverOptions(clientAuth = true): TlsOptions {
    const f = this.fallback;
    return { ...this.contextOptions(f), ...(clientAuth ? this.clientAuth() : {}), SNICallback: (name, cb) => cb(null, this.contextFor(name)) };
  }

  private contextOptions(p: CertificatePair): TlsOptions {
    return { ...TLS_DEFAULTS, cert: p.cert, key: p.key, ca: this.opts.clientCa };
  }

  /** With a client CA: a certificate is requested, and a handshake without a valid one fails. */
  private clientAuth(): TlsOptions {
    return this.opts.clientCa === undefined ? {} : { requestCert: true, rejectUnauthorized: true };
  }

  /** Keeps `server`'s fallback pair current across reloads (its SNI selection reads the set directly). */
  attach(server: TlsServer): void {
    this.servers.add(server);
  }

  /** Forgets the servers attached (they are closing). */
  detachAll(): void {
    this.servers.clear();
  }

  /** What an operator must know (readiness's degraded reasons): pairs that failed to reload, expired ones. */
  problems(): string[] {
    const out = [...this.failing].map(([source, why]) => `TLS certificate ${source} not reloaded (the last good pair serves): ${why}`);
    const now = this.opts.now();
    for (const p of this.pairs) if (p.notAfter < now) out.push(`TLS certificate ${p.source} expired at ${new Date(p.notAfter).toISOString()}`);
    return out;
  }

  /**
   * Re-reads every pair: unchanged bytes keep their pair, changed ones are loaded, a pair whose files fail
   * keeps its last good one, a pair gone from the directory is dropped — unless none would be left.
   */
  reload(): void {
    let files: PairFiles[];
    try {
      files = this.scan();
    } catch (err) {
      this.fail('dir' in this.from ? this.from.dir : this.from.certFile, err as Error);
      return;
    }
    const old = new Map(this.pairs.map((p) => [p.source, p]));
    const next: CertificatePair[] = [];
    for (const f of files) {
      const last = old.get(f.source);
      let cert: Buffer;
      let key: Buffer;
      try {
        cert = readFileSync(f.certFile);
        key = readFileSync(f.keyFile);
      } catch (err) {
        this.fail(f.source, err as Error);
        if (last !== undefined) next.push(last);
        continue;
      }
      if (last !== undefined && last.cert.equals(cert) && last.key.equals(key)) {
        this.failing.delete(f.source);
        next.push(last);
        continue;
      }
      try {
        next.push(loadPair(f.source, cert, key, this.opts.clientCa));
        this.failing.delete(f.source);
        this.opts.onReload?.({ source: f.source, result: 'loaded' });
      } catch (err) {
        this.fail(f.source, err as Error);
        if (last !== undefined) next.push(last);
      }
    }
    const where = 'dir' in this.from ? this.from.dir : this.from.certFile;
    if (next.length === 0) {
      if (this.pairs.length > 0) this.fail(where, new Error('no certificate pair is left; the last good ones serve'));
      return;
    }
    // Problems of pairs no longer on disk, and of the directory as a whole, are over.
    const seen = new Set(files.map((f) => f.source));
    for (const source of this.failing.keys()) if (!seen.has(source)) this.failing.delete(source);
    for (const source of old.keys()) if (!seen.has(source)) this.opts.onReload?.({ source, result: 'removed' });
    const fallbackBefore = this.pairs.length > 0 ? this.fallback : undefined;
    this.pairs = next;
    if (this.fallback !== fallbackBefore) for (const s of this.servers) s.setSecureContext(this.contextOptions(this.fallback));
  }

  /** Reports a problem with `source` until it loads again (once per distinct reason). */
  fail(source: string, error: Error): void {
    const why = error.message;
    if (this.failing.get(source) === why) return;
    this.failing.set(source, why);
    this.opts.onReload?.({ source, result: 'failed', error });
  }

  /** The pairs on disk now, in name order. */
  private scan(): PairFiles[] {
    const from = this.from;
    if (!('dir' in from)) return [{ source: from.certFile, certFile: from.certFile, keyFile: from.keyFile }];
    const out: PairFiles[] = [];
    for (const entry of readdirSync(from.dir).sort()) {
      if (entry.startsWith('.')) continue;
      const path = join(from.dir, entry);
      const flat = FLAT_CERT.exec(entry);
      if (flat !== null) {
        if (entry === 'tls.crt' || !isFile(join(from.dir, flat[1]! + '.key'))) continue;
        out.push({ source: flat[1]!, certFile: path, keyFile: join(from.dir, flat[1]! + '.key') });
      } else if (isDir(path) && isFile(join(path, 'tls.crt'))) {
        out.push({ source: entry, certFile: join(path, 'tls.crt'), keyFile: join(path, 'tls.key') });
      }
    }
    // One mounted Secret as the directory itself: its tls.crt + tls.key are the pair `default`.
    if (isFile(join(from.dir, 'tls.crt'))) out.unshift({ source: 'default', certFile: join(from.dir, 'tls.crt'), keyFile: join(from.dir, 'tls.key') });
    return out;
  }

  /** The files the pairs are read from, and a `--tls-dir` itself (a pair added or removed). */
  followed(): string[] {
    const files = this.scanQuietly().flatMap((p) => [p.certFile, p.keyFile]);
    return 'dir' in this.from ? [this.from.dir, ...files] : files;
  }

  private scanQuietly(): PairFiles[] {
    try {
      return this.scan();
    } catch {
      return [];
    }
  }
}

function isFile(path: string): boolean {
  try {
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

function isDir(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

import { appendFile, open, readFile, rename, stat, unlink } from 'node:fs/promises';
import { watchFile, type FileWatch } from '../lib/file-watch.js';
import type { RevokedLink } from './api-keys.js';

/**
 * The file store's link revocations: an append-only journal beside the API key file (`<keys>.revocations`,
 * one JSON line `{"id","ns","exp"}` per revocation), so a revoke costs one small append — never a
 * read, parse and rewrite of the key file — and a gateway watching it reads only the bytes added since it
 * last looked. Every gateway and `sandgate link revoke` sharing the key file append to it.
 *
 * It rotates, never rewrites: once past `rotateBytes`, and only when every revocation in the previous
 * generation (`<keys>.revocations.old`) has expired, the journal is renamed over it (under a lock file,
 * so two gateways never rotate at once). Both generations are read, so nothing live is ever dropped —
 * an append racing the rename lands in the renamed file, which is read as well — and the journal holds at
 * most one generation of appends beyond what is live.
 */

interface Generation {
  readonly path: string;
  ino: number;
  /** Bytes read so far (up to the last complete line). */
  offset: number;
  /** When its last revocation expires (epoch seconds). */
  lapsesAt: number;
}

const LOCK_STALE_MS = 60_000;

export class RevocationJournal {
  private entries = new Map<string, RevokedLink>();
  /** Revocations per namespace (live or not yet pruned): the bound's count. */
  private readonly byNamespace = new Map<string, Map<string, number>>();
  private readonly current: Generation;
  private readonly old: Generation;
  private readonly watches: FileWatch[] = [];
  /** Reads run one at a time: two reading from the same offset would count its bytes twice. */
  private reading: Promise<void> = Promise.resolve();
  /** Appends this process made (tests: a revoke is one append). */
  appends = 0;

  constructor(
    path: string,
    private readonly onError: (err: Error) => void,
    private readonly rotateBytes = 1 << 20,
    private readonly now: () => number = Date.now,
  ) {
    this.current = { path, ino: 0, offset: 0, lapsesAt: 0 };
    this.old = { path: `${path}.old`, ino: 0, offset: 0, lapsesAt: 0 };
  }

  async start(): Promise<void> {
    // Watched before the first read: an append between the two is then seen, never lost.
    for (const g of [this.current, this.old]) this.watches.push(watchFile(g.path, () => void this.serial(() => this.refresh(g)).catch(this.onError), this.onError, 20));
    await this.serial(() => this.reload());
  }

  has(id: string): boolean {
    return this.entries.has(id);
  }

  /** Unexpired revocations counted against `namespace`. */
  live(namespace: string): number {
    const ids = this.byNamespace.get(namespace);
    if (ids === undefined) return 0;
    const nowS = this.now() / 1000;
    for (const [id, exp] of ids) if (exp <= nowS) ids.delete(id);
    return ids.size;
  }

  /** Appends a revocation (already counted in memory, so concurrent revokes see it at once). */
  async append(r: RevokedLink): Promise<void> {
    this.add(r);
    this.appends++;
    await appendFile(this.current.path, JSON.stringify({ id: r.id, ns: r.namespace, exp: r.expiresAt }) + '\n', { mode: 0o600 });
    await this.serial(() => this.refresh(this.current));
    if (this.current.offset >= this.rotateBytes && this.now() / 1000 >= this.old.lapsesAt) await this.rotate();
  }

  close(): void {
    for (const w of this.watches) w.close();
  }

  private serial(fn: () => Promise<void>): Promise<void> {
    const next = this.reading.then(fn);
    this.reading = next.catch(() => undefined);
    return next;
  }

  private add(r: RevokedLink, from?: Generation): void {
    if (from !== undefined) from.lapsesAt = Math.max(from.lapsesAt, r.expiresAt);
    this.entries.set(r.id, r);
    let ids = this.byNamespace.get(r.namespace);
    if (ids === undefined) this.byNamespace.set(r.namespace, (ids = new Map()));
    ids.set(r.id, r.expiresAt);
  }

  /** Reads what a generation gained; a file replaced or shortened (a rotation) reloads both. */
  private async refresh(g: Generation): Promise<void> {
    const st = await stat(g.path).catch(() => undefined);
    if (st === undefined || st.ino !== g.ino || st.size < g.offset) return this.reload();
    if (st.size === g.offset) return;
    const fh = await open(g.path, 'r');
    try {
      const buf = Buffer.alloc(st.size - g.offset);
      const { bytesRead } = await fh.read(buf, 0, buf.length, g.offset);
      const text = buf.subarray(0, bytesRead).toString('utf8');
      const end = text.lastIndexOf('\n') + 1;
      for (const r of parseLines(text.slice(0, end))) this.add(r, g);
      g.offset += Buffer.byteLength(text.slice(0, end));
    } finally {
      await fh.close();
    }
  }

  private async reload(): Promise<void> {
    const entries = new Map<string, RevokedLink>();
    this.entries = entries;
    this.byNamespace.clear();
    for (const g of [this.old, this.current]) {
      const st = await stat(g.path).catch(() => undefined);
      const text = st === undefined ? '' : await readFile(g.path, 'utf8').catch(() => '');
      const end = text.lastIndexOf('\n') + 1;
      g.ino = st?.ino ?? 0;
      g.offset = Buffer.byteLength(text.slice(0, end));
      g.lapsesAt = 0;
      for (const r of parseLines(text.slice(0, end))) this.add(r, g);
    }
  }

  /** Renames the journal over the previous generation once everything in that one has expired. */
  private async rotate(): Promise<void> {
    const lock = `${this.current.path}.lock`;
    const held = await open(lock, 'wx').catch(async (err: NodeJS.ErrnoException) => {
      // A lock left by a process that died mid-rotation is broken after a minute.
      if (err.code === 'EEXIST' && this.now() - ((await stat(lock).catch(() => undefined))?.mtimeMs ?? this.now()) > LOCK_STALE_MS) await unlink(lock).catch(() => undefined);
      return undefined;
    });
    if (held === undefined) return;
    try {
      const nowS = this.now() / 1000;
      const previous = parseLines(await readFile(this.old.path, 'utf8').catch(() => ''));
      if (previous.some((r) => r.expiresAt > nowS)) return;
      await rename(this.current.path, this.old.path);
    } finally {
      await held.close();
      await unlink(lock).catch(() => undefined);
    }
    await this.serial(() => this.reload());
  }
}

/** Revocations in journal lines; a malformed line is skipped (a torn write, a hand edit). */
function parseLines(text: string): RevokedLink[] {
  const out: RevokedLink[] = [];
  for (const line of text.split('\n')) {
    if (line === '') continue;
    try {
      const o = JSON.parse(line) as { id?: unknown; ns?: unknown; exp?: unknown };
      if (typeof o.id === 'string' && typeof o.ns === 'string' && typeof o.exp === 'number') out.push({ id: o.id, namespace: o.ns, expiresAt: o.exp });
    } catch {
      continue;
    }
  }
  return out;
}

import { readFile, rename, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { watchFile, type FileWatch } from '../lib/file-watch.js';
import { parse as parseYaml, stringify } from 'yaml';
import { SandgateError } from '../domain/errors.js';
import { parseRecord, parseRevokedLinkId, type ApiKeyRecord, type ApiKeyStore, type RevokedLink } from './api-keys.js';
import { RevocationJournal } from './revocation-journal.js';

interface KeyFile {
  readonly keys: ApiKeyRecord[];
  /** Revoked links kept in the key file itself (`revokedLinks: [{id, expiresAt}]`): honoured, never added to. */
  readonly revokedLinks: unknown[];
}

/**
 * API keys in a YAML file (`keys: [{id, team, hash, createdAt}]`), re-read when it changes — a revocation
 * by `sandgate keys revoke` on any machine sharing the file reaches every gateway that watches it. Writes
 * replace the file atomically (write a temporary file, then rename). Revoked links go to a journal beside
 * it (revocation-journal.ts): a revoke appends one line and never rewrites this file.
 */
export class FileApiKeyStore implements ApiKeyStore {
  readonly kind = 'file' as const;
  private recordsByHash = new Map<string, ApiKeyRecord>();
  private revoked = new Set<string>();
  private watcher: FileWatch | undefined;
  private problem: string | undefined;
  /** The revoked links: `<path>.revocations`. */
  readonly journal: RevocationJournal;

  constructor(
    readonly path: string,
    private readonly onError: (err: Error) => void = () => undefined,
  ) {
    this.journal = new RevocationJournal(`${path}.revocations`, onError);
  }

  async start(): Promise<void> {
    // Watched before the first read: a change between the two is then seen, never lost.
    this.watcher = watchFile(this.path, () => void this.load(), this.onError, 20);
    await this.load();
    await this.journal.start();
  }

  byHash(hash: string): ApiKeyRecord | undefined {
    return this.recordsByHash.get(hash);
  }

  isLinkRevoked(id: string): boolean {
    return this.journal.has(id) || this.revoked.has(id);
  }

  async list(): Promise<ApiKeyRecord[]> {
    return (await this.read()).keys;
  }

  async add(record: ApiKeyRecord): Promise<void> {
    const f = await this.read();
    await this.write({ ...f, keys: [...f.keys, record] });
  }

  async revoke(id: string): Promise<boolean> {
    const f = await this.read();
    const kept = f.keys.filter((r) => r.id !== id);
    if (kept.length === f.keys.length) return false;
    await this.write({ ...f, keys: kept });
    return true;
  }

  async revokeLink(r: RevokedLink, perNamespace: number): Promise<boolean> {
    // Counted from the mirror: a journal shared by several gateways may take one more per racing gateway.
    if (this.journal.live(r.namespace) >= perNamespace) return false;
    await this.journal.append(r);
    return true;
  }

  degraded(): string[] {
    return this.problem === undefined ? [] : [this.problem];
  }

  async close(): Promise<void> {
    this.watcher?.close();
    this.journal.close();
  }

  private async read(): Promise<KeyFile> {
    let text: string;
    try {
      text = await readFile(this.path, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { keys: [], revokedLinks: [] };
      throw new SandgateError('config_invalid', `cannot read API keys file ${this.path}: ${(err as Error).message}`, { cause: err });
    }
    let doc: unknown;
    try {
      doc = parseYaml(text);
    } catch (err) {
      throw new SandgateError('config_invalid', `API keys file ${this.path} does not parse: ${(err as Error).message}`, { cause: err });
    }
    const list = (doc as { keys?: unknown } | null)?.keys ?? [];
    const links = (doc as { revokedLinks?: unknown } | null)?.revokedLinks ?? [];
    if (!Array.isArray(list) || !Array.isArray(links)) throw new SandgateError('config_invalid', `API keys file ${this.path} must hold a "keys" list (and "revokedLinks", if any, a list)`);
    return { keys: list.map(parseRecord).filter((r): r is ApiKeyRecord => r !== undefined), revokedLinks: links };
  }

  private async write(f: KeyFile): Promise<void> {
    const tmp = join(dirname(this.path), `.${basename(this.path)}.${process.pid}.tmp`);
    await writeFile(tmp, stringify(f.revokedLinks.length === 0 ? { keys: f.keys } : f), { mode: 0o600 });
    await rename(tmp, this.path);
    this.index(f);
  }

  private async load(): Promise<void> {
    try {
      this.index(await this.read());
      this.problem = undefined;
    } catch (err) {
      // Keep serving the last good set; an unreadable file must not open or close every door at once.
      this.problem = (err as Error).message;
      this.onError(err as Error);
    }
  }

  private index(f: KeyFile): void {
    this.recordsByHash = new Map(f.keys.map((r) => [r.hash, r]));
    this.revoked = new Set(f.revokedLinks.map(parseRevokedLinkId).filter((id): id is string => id !== undefined));
  }
}

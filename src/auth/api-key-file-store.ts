import { readFile, rename, writeFile } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { watchFile, type FileWatch } from '../lib/file-watch.js';
import { parse as parseYaml, stringify } from 'yaml';
import { SandgateError } from '../domain/errors.js';
import { parseRecord, type ApiKeyRecord, type ApiKeyStore } from './api-keys.js';

/**
 * API keys in a YAML file (`keys: [{id, team, hash, createdAt}]`), re-read when it changes — a revocation
 * by `sandgate keys revoke` on any machine sharing the file reaches every gateway that watches it. Writes
 * replace the file atomically (write a temporary file, then rename).
 */
export class FileApiKeyStore implements ApiKeyStore {
  readonly kind = 'file' as const;
  private recordsByHash = new Map<string, ApiKeyRecord>();
  private watcher: FileWatch | undefined;
  private problem: string | undefined;

  constructor(
    readonly path: string,
    private readonly onError: (err: Error) => void = () => undefined,
  ) {}

  async start(): Promise<void> {
    await this.load();
    this.watcher = watchFile(this.path, 20, () => void this.load(), this.onError);
  }

  byHash(hash: string): ApiKeyRecord | undefined {
    return this.recordsByHash.get(hash);
  }

  async list(): Promise<ApiKeyRecord[]> {
    return this.read();
  }

  async add(record: ApiKeyRecord): Promise<void> {
    const records = await this.read();
    await this.write([...records, record]);
  }

  async revoke(id: string): Promise<boolean> {
    const records = await this.read();
    const kept = records.filter((r) => r.id !== id);
    if (kept.length === records.length) return false;
    await this.write(kept);
    return true;
  }

  degraded(): string[] {
    return this.problem === undefined ? [] : [this.problem];
  }

  async close(): Promise<void> {
    this.watcher?.close();
  }

  private async read(): Promise<ApiKeyRecord[]> {
    let text: string;
    try {
      text = await readFile(this.path, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw new SandgateError('config_invalid', `cannot read API keys file ${this.path}: ${(err as Error).message}`, { cause: err });
    }
    let doc: unknown;
    try {
      doc = parseYaml(text);
    } catch (err) {
      throw new SandgateError('config_invalid', `API keys file ${this.path} does not parse: ${(err as Error).message}`, { cause: err });
    }
    const list = (doc as { keys?: unknown } | null)?.keys ?? [];
    if (!Array.isArray(list)) throw new SandgateError('config_invalid', `API keys file ${this.path} must hold a "keys" list`);
    return list.map(parseRecord).filter((r): r is ApiKeyRecord => r !== undefined);
  }

  private async write(records: readonly ApiKeyRecord[]): Promise<void> {
    const tmp = join(dirname(this.path), `.${basename(this.path)}.${process.pid}.tmp`);
    await writeFile(tmp, stringify({ keys: records }), { mode: 0o600 });
    await rename(tmp, this.path);
    this.index(records);
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

  private index(records: readonly ApiKeyRecord[]): void {
    this.recordsByHash = new Map(records.map((r) => [r.hash, r]));
  }
}

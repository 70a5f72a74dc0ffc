import { mkdirSync, readdirSync, readlinkSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * A volume as the kubelet mounts a Secret or ConfigMap, updated the way its atomic writer updates one:
 *
 *   DIR/..2026_12_01_16_04_05.000000001/<key>   the content, one timestamped directory per version
 *   DIR/..data -> ..2026_12_01_16_04_05.000000001
 *   DIR/<key> -> ..data/<key>                  what the program opens
 *
 * An update writes a new timestamped directory, points `..data_tmp` at it, renames `..data_tmp` over
 * `..data` (the one atomic step), adds or removes the `<key>` links, and removes the old directory. The
 * `<key>` links themselves never change, so a watch on a key's name sees nothing.
 */
export class AtomicWriterVolume {
  private version = 0;

  constructor(
    readonly dir: string,
    files: Readonly<Record<string, string | Buffer>>,
  ) {
    mkdirSync(dir, { recursive: true });
    const first = this.writeVersion(files);
    symlinkSync(first, join(dir, '..data'));
    for (const key of Object.keys(files)) symlinkSync(join('..data', key), join(dir, key));
  }

  /** The path a program is given for `key`. */
  path(key: string): string {
    return join(this.dir, key);
  }

  /** Replaces the whole content, as a `kubectl apply` of the Secret or ConfigMap does. */
  update(files: Readonly<Record<string, string | Buffer>>): void {
    const old = readlinkSync(join(this.dir, '..data'));
    const before = new Set(this.keys());
    const next = this.writeVersion(files);
    symlinkSync(next, join(this.dir, '..data_tmp'));
    renameSync(join(this.dir, '..data_tmp'), join(this.dir, '..data'));
    for (const key of Object.keys(files)) if (!before.has(key)) symlinkSync(join('..data', key), join(this.dir, key));
    for (const key of before) if (!(key in files)) rmSync(join(this.dir, key));
    rmSync(join(this.dir, old), { recursive: true });
  }

  private keys(): string[] {
    return readdirSync(this.dir).filter((e) => !e.startsWith('..'));
  }

  private writeVersion(files: Readonly<Record<string, string | Buffer>>): string {
    const name = `..2026_12_01_16_04_05.${String(++this.version).padStart(9, '0')}`;
    mkdirSync(join(this.dir, name));
    for (const [key, content] of Object.entries(files)) writeFileSync(join(this.dir, name, key), content);
    return name;
  }
}

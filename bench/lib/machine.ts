import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { packageRoot } from '../../src/lib/package-root.js';

export const ROOT = packageRoot();

/** A compiled bench script by its path under bench/. */
export function benchScript(relative: string): string {
  return fileURLToPath(new URL('../' + relative, import.meta.url));
}

export const CLI = join(ROOT, 'dist', 'src', 'cli', 'main.js');

function run(cmd: string, args: readonly string[]): string | undefined {
  try {
    return execFileSync(cmd, [...args], { cwd: ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return undefined;
  }
}

export type MachineFacts = ReturnType<typeof machineFacts>;

export function machineFacts(date: Date) {
  const list = cpus();
  const { version } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };
  // --no-optional-locks: a plain `git status` may rewrite the index; the bench only reads.
  const status = run('git', ['--no-optional-locks', 'status', '--porcelain', '--untracked-files=no']);
  return {
    cpuModel: list[0]?.model.trim() ?? 'unknown',
    cores: list.length,
    memoryBytes: totalmem(),
    node: process.version,
    v8: process.versions.v8,
    platform: `${process.platform} ${process.arch}`,
    date: date.toISOString(),
    commit: (run('git', ['rev-parse', 'HEAD']) ?? 'unknown') + ` (sandgate ${version})`,
    dirty: status === undefined ? undefined : status.length > 0,
    redis: run('redis-server', ['--version'])?.match(/v=(\S+)/)?.[1],
  };
}

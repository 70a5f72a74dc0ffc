import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { fileURLToPath } from 'node:url';

/**
 * A real gateway in its own process (the built CLI, dist/), for tests that kill -9, SIGSTOP or SIGTERM a
 * replica. `npm test` builds first (pretest).
 */

const CLI = fileURLToPath(new URL('../../dist/src/cli/main.js', import.meta.url));

/** Calls `each` with every JSON log line a process writes to `stream`; a line that is not JSON is passed over. */
export function onLogLines(stream: Readable, each: (line: Record<string, unknown>) => void): void {
  let buf = '';
  stream.on('data', (d: Buffer) => {
    buf += d.toString();
    let i: number;
    while ((i = buf.indexOf('\n')) >= 0) {
      const text = buf.slice(0, i);
      buf = buf.slice(i + 1);
      let line: Record<string, unknown>;
      try {
        line = JSON.parse(text) as Record<string, unknown>;
      } catch {
        continue;
      }
      each(line);
    }
  });
}

export const TEST_SECRET = 'multi-gateway-test-secret-0123456789abcdef';

export interface GatewayProcess {
  readonly id: string;
  readonly proc: ChildProcess;
  readonly adminPort: number;
  readonly supervisorPort: number;
  readonly grpcPort: number;
  readonly proxyPort: number | undefined;
  readonly admin: string;
  readonly supervisorUrl: string;
  /** Log lines (parsed JSON) the process wrote so far. */
  readonly logs: Record<string, unknown>[];
  /** Public status of one sandbox as this gateway sees it, or undefined if it is unreachable. */
  sandbox(namespace: string, name: string): Promise<{ phase: string; reason: string; session: { gatewayId: string; sessionId: string; epoch: number } | null } | undefined>;
  signal(sig: NodeJS.Signals): void;
  exited(): Promise<number | null>;
}

/** Writes a sandboxes file and a secret file into a temp dir; returns their paths. */
export function clusterFiles(sandboxesYaml: string): { sandboxes: string; secret: string } {
  const dir = mkdtempSync(join(tmpdir(), 'sandgate-cluster-'));
  const sandboxes = join(dir, 'sandboxes.yaml');
  const secret = join(dir, 'secret');
  writeFileSync(sandboxes, sandboxesYaml);
  writeFileSync(secret, TEST_SECRET);
  return { sandboxes, secret };
}

/**
 * Flags of a gateway sharing presence over a Redis that ioredis reaches with `redisOptions` (Sentinel,
 * Cluster), with a short lease, fast rescans and heartbeats, and no readiness wait: what the failover
 * tests run every replica with.
 */
export function redisPresenceArgs(files: { sandboxes: string; secret: string }, redisOptions: object, leaseTtlMs: number): string[] {
  return [
    '--sandboxes', files.sandboxes,
    '--supervisor-secret-file', files.secret,
    '--presence', 'redis://127.0.0.1',
    '--presence-redis-options', JSON.stringify(redisOptions),
    '--lease-ttl-ms', String(leaseTtlMs),
    '--presence-rescan-ms', '500',
    '--heartbeat-interval-ms', '200',
    '--readiness-wait-ms', '0',
  ];
}

export async function startGatewayProcess(id: string, args: readonly string[]): Promise<GatewayProcess> {
  const proc = spawn(
    process.execPath,
    [CLI, 'serve', '--gateway-id', id, '--listen-host', '127.0.0.1', '--grpc-port', '0', '--admin-port', '0', '--supervisor-port', '0', '--proxy-port', '0', '--relay-port', '0', '--demo', 'off', ...args],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const logs: Record<string, unknown>[] = [];
  let stderr = '';
  proc.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const exit = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  let startTimer: NodeJS.Timeout | undefined;
  const started = await new Promise<Record<string, unknown>>((resolve, reject) => {
    onLogLines(proc.stdout!, (entry) => {
      logs.push(entry);
      if (entry.msg === 'sandgate started') resolve(entry);
    });
    void exit.then((code) => reject(new Error(`gateway ${id} exited with ${code} before starting: ${stderr}`)));
    // A gateway that never says it started must not outlive the test.
    startTimer = setTimeout(() => {
      proc.kill('SIGKILL');
      reject(new Error(`gateway ${id} did not start within 15 s: ${stderr}`));
    }, 15_000).unref();
  });
  // Only a gateway that never started is killed: one that runs longer than the bound is a long test.
  clearTimeout(startTimer);
  const admin = `http://127.0.0.1:${started.adminPort as number}`;
  return {
    id,
    proc,
    adminPort: started.adminPort as number,
    supervisorPort: started.supervisorPort as number,
    grpcPort: started.grpcPort as number,
    proxyPort: started.proxyPort as number | undefined,
    admin,
    supervisorUrl: `ws://127.0.0.1:${started.supervisorPort as number}`,
    logs,
    async sandbox(namespace, name) {
      try {
        const res = await fetch(`${admin}/v1/sandboxes/${namespace}/${name}`, { signal: AbortSignal.timeout(1000) });
        return (await res.json()) as never;
      } catch {
        return undefined;
      }
    },
    signal(sig) {
      proc.kill(sig);
    },
    exited: () => exit,
  };
}

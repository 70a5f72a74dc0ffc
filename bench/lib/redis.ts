import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { answers, freePort, sleep, type ProcessGroup } from './processes.js';

/**
 * A private redis-server for the presence benches (no persistence, loopback only), and command counting
 * from `INFO commandstats`: the bench's own INFO calls are left out of every count.
 */

export interface BenchRedis {
  readonly url: string;
  /** Calls per command since the server started, without INFO. */
  commandCalls(): Promise<Map<string, number>>;
  close(): void;
}

/** after − before, per command, dropping commands that did not move. */
export function callDelta(before: ReadonlyMap<string, number>, after: ReadonlyMap<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [cmd, n] of after) {
    const d = n - (before.get(cmd) ?? 0);
    if (d !== 0) out[cmd] = d;
  }
  return out;
}

/** True when a server on `port` answers PING. */
function pings(port: number): Promise<boolean> {
  return answers(port, 'PING\r\n', (d) => d.toString().startsWith('+PONG'));
}

export async function startRedis(group: ProcessGroup): Promise<BenchRedis> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'sandgate-bench-redis-'));
  const child = group.program('redis-server', 'redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir]);
  const deadline = Date.now() + 10_000;
  while (!(await pings(port))) {
    if (!child.running) throw new Error(`redis-server did not start: ${child.tailText() || 'it exited'}`);
    if (Date.now() > deadline) throw new Error(`redis-server on port ${port} did not answer PING within 10 s`);
    await sleep(50);
  }
  const admin = new Redis({ host: '127.0.0.1', port, maxRetriesPerRequest: 1 });
  admin.on('error', () => {});
  return {
    url: `redis://127.0.0.1:${port}`,
    async commandCalls() {
      const text = await admin.info('commandstats');
      const m = new Map<string, number>();
      for (const line of text.split('\n')) {
        const hit = /^cmdstat_([^:]+):calls=(\d+)/.exec(line.trim());
        if (hit !== null && hit[1] !== 'info') m.set(hit[1]!, Number(hit[2]));
      }
      return m;
    },
    close() {
      admin.disconnect();
    },
  };
}

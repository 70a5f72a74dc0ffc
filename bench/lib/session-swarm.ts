import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { benchScript } from './machine.js';
import { metricValue } from './metrics.js';
import { sleep, type Child, type ProcessGroup } from './processes.js';

/** The runner's side of supervisor-swarm.ts, and what the session benches share. */

export const AUDIENCE = 'sandgate-supervisor';

/** Flags every session bench gives the gateway: its supervisor secret, and room for every session from loopback. */
export function sessionArgs(secretFile: string): string[] {
  return ['--supervisor-secret-file', secretFile, '--max-sessions-per-source', '1000000', '--max-sessions', '1000000'];
}

/** Writes a supervisor token secret (the file `--supervisor-secret-file` reads). */
export function writeSecret(dir: string): string {
  const path = join(dir, 'supervisor-secret');
  writeFileSync(path, randomBytes(32).toString('hex') + '\n', { mode: 0o600 });
  return path;
}

export interface Accepted {
  readonly accepted: number;
  readonly lastAcceptedAt: number;
  readonly timedOut: boolean;
  readonly firstError: string | undefined;
}

export class Swarm {
  private constructor(readonly child: Child) {}

  static async start(group: ProcessGroup, gateways: readonly string[], secretFile: string, name = 'swarm'): Promise<Swarm> {
    const child = group.node(name, benchScript('lib/supervisor-swarm.js'), [], { execArgv: ['--max-old-space-size=4096'] });
    await child.ready();
    await child.request('configure', { gateways, secretFile, audience: AUDIENCE });
    return new Swarm(child);
  }

  /** Opens sessions for sandboxes from … from+count-1 and waits until all are accepted; returns when connecting began. */
  async open(from: number, count: number, timeoutMs: number): Promise<{ startedAt: number; done: Accepted }> {
    const { startedAt } = await this.child.request<{ startedAt: number }>('open', { from, count });
    const done = await this.waitAccepted(count, startedAt, timeoutMs);
    return { startedAt, done };
  }

  waitAccepted(count: number, sinceMs: number, timeoutMs: number): Promise<Accepted> {
    return this.child.request<Accepted>('waitAccepted', { count, sinceMs, timeoutMs }, timeoutMs + 10_000);
  }

  close(): Promise<unknown> {
    return this.child.request('close');
  }

  /** The storm: every session reconnects within 50 ms. Returns when reconnecting began. */
  async reconnect(): Promise<number> {
    const t = Date.now();
    await this.child.request('reconnect');
    return t;
  }

  setGateways(gateways: readonly string[]): Promise<unknown> {
    return this.child.request('setGateways', { gateways });
  }

  stop(): Promise<void> {
    return this.child.stop();
  }
}

/** Ready sandboxes in a gateway's view, from /metrics. */
export function readyCount(adminUrl: string): Promise<number> {
  return metricValue(adminUrl, 'sandgate_view_sandboxes_by_phase', { phase: 'Ready' });
}

/** Polls /metrics until `predicate(Ready count)`; resolves with the time it held (epoch ms). */
export async function untilReady(adminUrl: string, predicate: (ready: number) => boolean, timeoutMs: number, pollMs = 25): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const n = await readyCount(adminUrl);
    if (predicate(n)) return Date.now();
    if (Date.now() > deadline) throw new Error(`${adminUrl}: Ready count ${n} did not reach the expected value within ${timeoutMs} ms`);
    await sleep(pollMs);
  }
}

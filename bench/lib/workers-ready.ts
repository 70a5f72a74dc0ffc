import { get } from 'node:http';
import { descendantCount } from './proc-cpu.js';
import { sleep } from './processes.js';
import type { Target } from './targets.js';

/**
 * A gateway started with `--workers N` answers /readyz 200 as soon as its first worker is ready: the
 * primary hands each new connection to a worker that is listening, round-robin. Before load, wait until N
 * workers run and enough consecutive fresh connections in a row (so every worker gets some) answer 200.
 */

function readyz(url: string): Promise<number | undefined> {
  return new Promise((resolve) => {
    // agent: false — a new connection per request, so the primary picks a worker for each.
    const req = get(url, { agent: false, timeout: 2_000 }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(undefined));
  });
}

export async function waitForWorkers(gw: Target, workers: number, timeoutMs = 60_000): Promise<void> {
  const pid = gw.pid;
  const url = gw.adminUrl + '/readyz';
  const needed = workers * 4;
  const deadline = Date.now() + timeoutMs;
  let streak = 0;
  while (streak < needed) {
    if (Date.now() > deadline) throw new Error(`${gw.name}: ${workers} workers were not all ready within ${timeoutMs} ms (${descendantCount(pid)} running)`);
    if (!gw.child.running) throw new Error(`${gw.name} exited:\n${gw.child.tailText()}`);
    const ok = descendantCount(pid) >= workers && (await readyz(url)) === 200;
    streak = ok ? streak + 1 : 0;
    if (!ok) await sleep(50);
  }
}

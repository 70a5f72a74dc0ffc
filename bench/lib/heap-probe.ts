import cluster from 'node:cluster';
import { memoryAfterGc } from './heap-after-gc.js';
import { exitWithParent, serveIpc } from './ipc.js';

/**
 * Loaded into every process under test with `node --expose-gc --import <this file>`, before the gateway's
 * own entry point runs: it answers the runner's questions over the IPC channel without touching the code
 * under test.
 *
 * `heap`: two full GCs, then process.memoryUsage() — heap used after GC is what "bytes per sandbox" and
 * "bytes per session" are computed from.
 *
 * CPU time is not asked here: the runner reads it from /proc (proc-stat.ts), which costs the process nothing.
 */

export interface HeapFacts {
  readonly heapUsed: number;
  readonly heapTotal: number;
  readonly rss: number;
  readonly external: number;
  readonly arrayBuffers: number;
}

// A `--workers` gateway's workers inherit these flags, but their IPC channel belongs to node:cluster: the
// probe would unref it and a worker waiting for its shared listener would exit. The runner asks the primary.
if (process.send !== undefined && !cluster.isWorker) {
  serveIpc(
    {
      heap(): HeapFacts {
        const m = memoryAfterGc();
        return { heapUsed: m.heapUsed, heapTotal: m.heapTotal, rss: m.rss, external: m.external, arrayBuffers: m.arrayBuffers };
      },
    },
    false,
  );
  exitWithParent();
}

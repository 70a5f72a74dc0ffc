import cluster from 'node:cluster';
import { memoryAfterGc } from './heap-after-gc.js';
import { exitWithParent, serveIpc } from './ipc.js';

/**
 * Loaded into every process under test with `node --expose-gc --import <this file>`, before the gateway's
 * own entry point runs: `heap` answers process.memoryUsage() after two full GCs over the IPC channel,
 * without touching the code under test. (CPU time is read from /proc, which costs the process nothing.)
 */

export type HeapFacts = NodeJS.MemoryUsage;

// A `--workers` gateway's workers inherit these flags, but their IPC channel belongs to node:cluster: the
// probe would unref it and a worker waiting for its shared listener would exit. The runner asks the primary.
if (process.send !== undefined && !cluster.isWorker) {
  serveIpc({ heap: (): HeapFacts => memoryAfterGc() }, false);
  exitWithParent();
}

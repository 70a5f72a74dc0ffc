import cluster from 'node:cluster';
import { memoryAfterGc } from './heap-after-gc.js';
import { exitWithParent, serveIpc } from './ipc.js';

/** Loaded into every process under test with `--import`, so heap figures need nothing of the code under test. */

// A `--workers` gateway's workers inherit these flags, but their IPC channel belongs to node:cluster: the
// probe would unref it and a worker waiting for its shared listener would exit. The runner asks the primary.
if (process.send !== undefined && !cluster.isWorker) {
  serveIpc({ heap: () => memoryAfterGc() }, false);
  exitWithParent();
}

import { Server, ServerCredentials, type ServerWritableStream } from '@grpc/grpc-js';
import type { BackendSnapshot } from '../../src/domain/sandbox.js';
import { sandboxDriverService, type WireWatchEvent, type WireWatchRequest } from '../../src/drivers/grpc/driver-proto.js';
import { snapshotToWire } from '../../src/drivers/grpc/sandbox-codec.js';
import { announceReady, exitWithParent, serveIpc } from './ipc.js';
import { benchSnapshot } from './sandboxes.js';

/**
 * A remote driver for the churn section: its updates (a new resourceVersion and Ready transition time, as a
 * backend's status heartbeat) reach the gateway through the same WatchSandboxes stream as in production.
 */

const TICK_MS = 10;

const port = Number(process.argv[2] ?? '0');
const watchers = new Set<ServerWritableStream<WireWatchRequest, WireWatchEvent>>();
let snapshots: BackendSnapshot[] = [];
let version = 1;
let cursor = 0;
let timer: NodeJS.Timeout | undefined;
let sent = 0;
let startedAt = 0;

/** Events per `EventBatch` message at most, well under 4 MiB. */
const MAX_BATCH = 500;

function update(pending: WireWatchEvent[]): void {
  const i = cursor;
  cursor = (cursor + 1) % snapshots.length;
  const prior = snapshots[i]!;
  const s: BackendSnapshot = {
    ...prior,
    resourceVersion: String(++version),
    conditions: [{ ...prior.conditions[0]!, lastTransitionTime: new Date(1_735_689_600_000 + version * 1000).toISOString() }],
  };
  snapshots[i] = s;
  pending.push({ upserted: snapshotToWire(s) });
  sent++;
}

function churn(rate: number): { rate: number } {
  stop();
  sent = 0;
  startedAt = performance.now();
  if (rate <= 0) return { rate: 0 };
  timer = setInterval(() => {
    // Catch up to where the rate says we should be, so a late tick does not lower the rate.
    const due = Math.floor(((performance.now() - startedAt) / 1000) * rate);
    const pending: WireWatchEvent[] = [];
    while (sent < due) update(pending);
    for (const w of watchers) for (let i = 0; i < pending.length; i += MAX_BATCH) w.write({ batch: { events: pending.slice(i, i + MAX_BATCH) } });
  }, TICK_MS);
  return { rate };
}

function stop(): { sent: number; seconds: number } {
  clearInterval(timer);
  timer = undefined;
  return { sent, seconds: (performance.now() - startedAt) / 1000 };
}

const server = new Server();
server.addService(sandboxDriverService().service, {
  WatchSandboxes(call: ServerWritableStream<WireWatchRequest, WireWatchEvent>): void {
    for (const s of snapshots) call.write({ snapshot: snapshotToWire(s) });
    call.write({ synced: {} });
    watchers.add(call);
    const drop = (): void => void watchers.delete(call);
    call.on('cancelled', drop);
    call.on('close', drop);
    call.on('error', drop);
  },
});

serveIpc({
  setup({ count }: { count: number }) {
    snapshots = [];
    for (let i = 0; i < count; i++) snapshots.push(benchSnapshot(i, version));
    return { count };
  },
  churn: ({ rate }: { rate: number }) => churn(rate),
  stop: () => stop(),
});
server.bindAsync(`127.0.0.1:${port}`, ServerCredentials.createInsecure(), (err, bound) => {
  if (err) throw err;
  announceReady({ port: bound });
});
exitWithParent();
process.once('SIGTERM', () => {
  clearInterval(timer);
  server.forceShutdown();
  process.exit(0);
});

import cluster, { type Worker } from 'node:cluster';
import { hostname } from 'node:os';
import { resolveConfig } from '../config/load.js';
import { SandgateError } from '../domain/errors.js';
import type { Config } from '../config/schema.js';
import { startDemo, type Demo } from '../demo/demo.js';
import { FileDriver } from '../drivers/file/file-driver.js';
import { supervisorKeysFromConfig } from '../config/secrets.js';
import { startFailed } from '../config/start-errors.js';
import { startGateway } from '../gateway.js';

function wantsDemo(c: Config): boolean {
  return c.demo === 'on' || (c.demo === 'auto' && c.sandboxes === '' && c.drivers.length === 0 && !c.kubernetes);
}

/** What a worker sends its primary once its gateway has started. */
const WORKER_STARTED = 'sandgate:worker-started';

/**
 * `--workers N`: the primary forks N gateway processes that share every listening socket (node:cluster
 * hands connections to workers), restarts a worker that dies once all have started, and passes
 * SIGTERM/SIGINT on for a graceful stop. Each worker is a full gateway with its own view; they agree
 * through the shared drivers and the Redis presence store, and each names itself `<gateway-id>-w<n>` there.
 *
 * Start-up is all or nothing, as in one process: a worker that exits before it has started (its one-line
 * start-up error already printed) stops the others, and the primary exits with that worker's code.
 */
async function runPrimary(config: Config): Promise<number> {
  if (wantsDemo(config)) throw new SandgateError('config_invalid', '--workers above 1 needs a driver (--sandboxes, --drivers or --kubernetes); the demo runs in one process');
  if (config.presence === 'memory' && supervisorKeysFromConfig(config) !== undefined) {
    throw new SandgateError('config_invalid', '--workers above 1 with supervisor sessions needs --presence redis://… so every worker sees every session');
  }
  let running = false;
  let stopping = false;
  let signalled = false;
  let restart: NodeJS.Timeout | undefined;
  // cluster.workers keeps an exited worker until its IPC channel has closed too.
  const live = (): Worker[] => Object.values(cluster.workers ?? {}).filter((w): w is Worker => w !== undefined && !w.isDead());
  let allStopped: () => void = () => undefined;
  const stopped = new Promise<void>((resolve) => (allStopped = resolve));
  const check = (): void => {
    if (stopping && live().length === 0) allStopped();
  };
  cluster.on('exit', check);
  const stop = (signal: NodeJS.Signals): void => {
    stopping = true;
    clearTimeout(restart);
    for (const w of live()) w.process.kill(signal);
    check();
  };
  const onSignal = (signal: NodeJS.Signals): void => {
    signalled = true;
    stop(signal);
  };
  process.once('SIGTERM', onSignal);
  process.once('SIGINT', onSignal);

  /** Forks a worker; resolves when it has started, or with its exit code if it exits first. */
  const fork = (): Promise<number | undefined> =>
    new Promise((resolve) => {
      const w = cluster.fork();
      w.on('message', (m: unknown) => {
        if (m === WORKER_STARTED) resolve(undefined);
      });
      w.on('exit', (code, signal) => {
        resolve(code ?? 1);
        if (!running || stopping) return;
        console.error(JSON.stringify({ level: 50, msg: 'worker exited; starting another', code, signal }));
        restart = setTimeout(() => void fork(), 500);
      });
    });
  // The first worker starts alone: a failure every worker would meet (a port in use, a missing file) is
  // then printed once, by it, instead of once per worker.
  let failed = await fork();
  if (failed === undefined && !stopping) failed = (await Promise.all(Array.from({ length: config.workers - 1 }, fork))).find((code) => code !== undefined);
  if (failed === undefined && !stopping) running = true;
  else stop('SIGTERM');
  await stopped;
  return signalled ? 0 : (failed ?? 0);
}

/** `sandgate serve`: runs until SIGTERM/SIGINT, then shuts down gracefully within shutdownTimeoutMs. */
export async function serve(argv: readonly string[]): Promise<number> {
  let config = resolveConfig({ argv, env: process.env });
  if (config.workers > 1 && cluster.isPrimary) return runPrimary(config);
  if (cluster.isWorker) {
    const base = config.gatewayId !== '' ? config.gatewayId : `${hostname()}-${process.ppid}`;
    config = resolveConfig({ argv, env: process.env, overrides: { gatewayId: `${base}-w${cluster.worker!.id}` } });
  }
  let demo: Demo | undefined;
  if (wantsDemo(config)) {
    const started = await startDemo(config.supervisorAudience).catch((err: unknown) => Promise.reject(startFailed('--demo', 'the demo sandboxes', err)));
    demo = started;
    config = resolveConfig({ argv, env: process.env, overrides: { sandboxes: started.sandboxesPath } });
  }
  const gateway = await startGateway({ config, supervisorKeys: demo?.supervisorKeys });
  if (cluster.isWorker) process.send!(WORKER_STARTED);
  if (demo !== undefined) {
    if (gateway.supervisorPort !== undefined) await demo.startSupervisors(gateway.supervisorPort);
    gateway.log.info(
      {
        upstreams: demo.upstreams,
        try: `curl -i -H 'Host: 8000-web.team-a.${config.baseDomain}' http://127.0.0.1:${gateway.adminPort}/authz/`,
        idle: `team-b/napper pauses after 30 s without traffic; the next request wakes it: curl -s -H 'Host: 8000-napper.team-b.${config.baseDomain}' http://127.0.0.1:${gateway.proxyPort ?? config.proxyPort}/`,
      },
      'demo mode: example sandboxes from examples/demo-sandboxes.yaml',
    );
  }
  return new Promise<number>((resolve) => {
    let stopping = false;
    const stop = (signal: string): void => {
      if (stopping) return;
      stopping = true;
      gateway.log.info({ signal }, 'shutting down');
      // The gateway's stops share one deadline (--shutdown-timeout-ms); this backstop, 2 s later, only
      // fires for a stop that ignored it.
      const hard = setTimeout(() => {
        gateway.log.error('shutdown took too long; exiting');
        resolve(1);
      }, config.shutdownTimeoutMs + 2000);
      hard.unref();
      void gateway
        .close()
        .then(() => demo?.close())
        .then(() => {
          clearTimeout(hard);
          // A cluster worker's IPC channel to the primary would keep it alive: let it go.
          if (cluster.isWorker) process.disconnect();
          resolve(0);
        });
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
    process.on('SIGHUP', () => {
      for (const d of gateway.drivers) if (d instanceof FileDriver) void d.reload();
    });
  });
}

import cluster from 'node:cluster';
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

/**
 * `--workers N`: the primary forks N gateway processes that share every listening socket (node:cluster
 * hands connections to workers), restarts a worker that dies, and passes SIGTERM/SIGINT on for a graceful
 * stop. Each worker is a full gateway with its own view; they agree through the shared drivers and the
 * Redis presence store, and each names itself `<gateway-id>-w<n>` there.
 */
async function runPrimary(config: Config): Promise<number> {
  if (wantsDemo(config)) throw new SandgateError('config_invalid', '--workers above 1 needs a driver (--sandboxes, --drivers or --kubernetes); the demo runs in one process');
  if (config.presence === 'memory' && supervisorKeysFromConfig(config) !== undefined) {
    throw new SandgateError('config_invalid', '--workers above 1 with supervisor sessions needs --presence redis://… so every worker sees every session');
  }
  let stopping = false;
  const fork = (): void => {
    cluster.fork().on('exit', (code, signal) => {
      if (stopping) return;
      console.error(JSON.stringify({ level: 50, msg: 'worker exited; starting another', code, signal }));
      setTimeout(fork, 500).unref();
    });
  };
  for (let i = 0; i < config.workers; i++) fork();
  return new Promise<number>((resolve) => {
    const stop = (signal: NodeJS.Signals): void => {
      stopping = true;
      for (const w of Object.values(cluster.workers ?? {})) w?.process.kill(signal);
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
    cluster.on('exit', () => {
      if (stopping && Object.keys(cluster.workers ?? {}).length === 0) resolve(0);
    });
  });
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
  if (demo !== undefined) {
    if (gateway.supervisorPort !== undefined) await demo.startSupervisors(gateway.supervisorPort);
    gateway.log.info(
      { upstreams: demo.upstreams, try: `curl -i -H 'Host: 8000-web.team-a.${config.baseDomain}' http://127.0.0.1:${gateway.adminPort}/authz/` },
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

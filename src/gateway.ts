import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { hostname } from 'node:os';
import type { DestinationStream } from 'pino';
import { createAdminApi, type Readiness } from './api/admin-api.js';
import { sendError } from './api/respond.js';
import { SandboxWatch } from './api/sandbox-watch.js';
import { redacted } from './config/load.js';
import type { Config } from './config/schema.js';
import type { RouteOptions, RouteSource } from './domain/route-key.js';
import type { Driver, DriverSink } from './drivers/driver.js';
import { FileDriver } from './drivers/file/file-driver.js';
import { Decider } from './edge/decider.js';
import { startGrpcServer } from './edge/envoy/grpc-server.js';
import { AUTHZ_PREFIX, createHttpAuthz } from './edge/http-authz.js';
import { createLogger, type Logger } from './observability/logger.js';
import { GatewayMetrics } from './observability/metrics.js';
import { SandboxView } from './view/sandbox-view.js';

/**
 * Wiring: one gateway process — the view, its drivers, the front doors and the admin API — started from a
 * resolved configuration, and stopped gracefully.
 */

export interface GatewayOptions {
  readonly config: Config;
  /** Log sink (tests pass a MemoryLogSink); default stdout. */
  readonly logDestination?: DestinationStream;
  /** Drivers to use instead of the ones the configuration names. */
  readonly drivers?: readonly Driver[];
  /** Clock (epoch ms); tests pass a fake one. */
  readonly now?: () => number;
}

export interface Gateway {
  readonly config: Config;
  readonly gatewayId: string;
  readonly view: SandboxView;
  readonly log: Logger;
  readonly metrics: GatewayMetrics;
  readonly drivers: readonly Driver[];
  readonly grpcPort: number;
  readonly adminPort: number;
  /** Graceful shutdown: NOT_SERVING, release waiters, stop drivers, close listeners (bounded). */
  close(): Promise<void>;
}

export function routeOptions(c: Config): RouteOptions {
  return {
    order: c.routeOrder as readonly RouteSource[],
    baseDomain: c.baseDomain,
    defaultNamespace: c.defaultNamespace,
    defaultPort: c.defaultPort,
    pathPrefix: c.pathPrefix,
  };
}

export function driversFromConfig(c: Config): Driver[] {
  const drivers: Driver[] = [];
  if (c.sandboxes !== '') drivers.push(new FileDriver(c.sandboxes));
  return drivers;
}

function listen(server: Server, host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve((server.address() as AddressInfo).port);
    });
  });
}

function closeServer(server: Server, graceMs: number): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      server.closeAllConnections();
      resolve();
    }, graceMs);
    timer.unref();
    server.close(() => {
      clearTimeout(timer);
      resolve();
    });
    server.closeIdleConnections();
  });
}

export async function startGateway(opts: GatewayOptions): Promise<Gateway> {
  const config = opts.config;
  const gatewayId = config.gatewayId !== '' ? config.gatewayId : `${hostname()}-${process.pid}`;
  const log = createLogger(config.logLevel, opts.logDestination).child({ gatewayId });
  log.info({ config: redacted(config) }, 'configuration');
  const view = new SandboxView({
    now: opts.now ?? Date.now,
    tombstoneTtlMs: config.tombstoneTtlMs,
    waiters: { perSandbox: config.waitersPerSandbox, total: config.waitersTotal },
  });
  const metrics = new GatewayMetrics(view);
  const decider = new Decider(view, routeOptions(config), config.readinessWaitMs, metrics, log.child({ part: 'edge' }));
  const drivers = opts.drivers ?? driversFromConfig(config);
  let shuttingDown = false;
  const grpc = await startGrpcServer(decider, { host: config.listenHost, port: config.grpcPort, upstreamHeader: config.upstreamHeader }, log.child({ part: 'envoy' }));

  const readiness: Readiness = {
    notReady() {
      const reasons = view.unsyncedDrivers().map((d) => `driver ${d} has not synced`);
      if (shuttingDown) reasons.push('shutting down');
      return reasons;
    },
    degraded: () => [],
  };

  const driverLog = log.child({ part: 'drivers' });
  for (const d of drivers) view.registerDriver(d.id);
  const sinkFor = (d: Driver): DriverSink => ({
    replace(snapshots) {
      view.replace(d.id, snapshots);
      metrics.driverEvents.labels(d.id, 'resync').inc();
      driverLog.info({ driver: d.id, sandboxes: snapshots.length }, 'driver list applied');
      if (view.synced && !shuttingDown) grpc.setServing(true);
    },
    apply(event) {
      metrics.driverEvents.labels(d.id, view.apply(d.id, event) ? 'applied' : 'stale').inc();
    },
    error(err) {
      metrics.driverErrors.labels(d.id).inc();
      driverLog.warn({ driver: d.id, err }, err.message);
    },
  });

  const watch = new SandboxWatch(view);
  const adminApi = createAdminApi({ view, registry: metrics.registry, readiness, watch, gatewayId, log: log.child({ part: 'api' }) });
  const httpAuthz = createHttpAuthz(decider, config.upstreamHeader, log.child({ part: 'edge' }));
  const admin = createServer((req, res) => {
    const url = req.url ?? '/';
    if (url === AUTHZ_PREFIX || url.startsWith(AUTHZ_PREFIX + '/') || url.startsWith(AUTHZ_PREFIX + '?')) return httpAuthz(req, res);
    adminApi(req, res).catch((err: unknown) => {
      log.error({ err }, 'admin request failed');
      if (!res.headersSent) sendError(res, 'internal_error');
      else res.destroy();
    });
  });
  admin.keepAliveTimeout = 65_000;

  let adminPort: number;
  try {
    adminPort = await listen(admin, config.listenHost, config.adminPort);
  } catch (err) {
    await grpc.close(0);
    throw err;
  }
  for (const d of drivers) await d.start(sinkFor(d));
  if (view.synced) grpc.setServing(true);
  const tick = setInterval(() => view.tick(), 1000);
  tick.unref();
  log.info({ grpcPort: grpc.port, adminPort, drivers: drivers.map((d) => d.id) }, 'sandgate started');

  let closing: Promise<void> | undefined;
  const close = (): Promise<void> =>
    (closing ??= (async () => {
      shuttingDown = true;
      grpc.setServing(false);
      clearInterval(tick);
      view.waiters.close();
      watch.close();
      await Promise.all(drivers.map((d) => d.stop().catch((err: unknown) => driverLog.warn({ err, driver: d.id }, 'driver stop failed'))));
      const grace = config.shutdownTimeoutMs;
      await Promise.all([grpc.close(grace), closeServer(admin, grace)]);
      log.info('sandgate stopped');
    })());

  return { config, gatewayId, view, log, metrics, drivers, grpcPort: grpc.port, adminPort, close };
}

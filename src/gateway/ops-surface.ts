import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { join } from 'node:path';
import { createAdminApi, type Readiness } from '../api/admin-api.js';
import { ConsoleAssets } from '../api/console/console-assets.js';
import { createConsole, type GatewayLease, type GatewaysSource } from '../api/console/console-api.js';
import { SandboxWatch } from '../api/sandbox-watch.js';
import type { Config } from '../config/schema.js';
import { AuthzFront } from '../edge/authz-front.js';
import { createHttpAuthz, isAuthzPath, type HttpAuthz } from '../edge/http-authz.js';
import { closeGracefully, listenOn, PROXIED_METHODS, refuseConnect, type ServerTls } from '../lib/http-listen.js';
import { RequestGuard } from '../lib/request-guard.js';
import type { Lifecycle } from '../lib/lifecycle.js';
import { packageRoot } from '../lib/package-root.js';
import type { Logger } from '../observability/logger.js';
import type { PresenceStore } from '../sessions/presence/presence-store.js';
import type { Core, Serving } from './core.js';
import { startListener } from './doors.js';

/**
 * The ops surface: the admin port (health, readiness, metrics, the sandbox API and console, and HTTP
 * authz under /authz/) and, with `--ops-port`, a separate operator port that takes the API and console
 * off the admin port.
 */

/** The console's page, scripts and styles, shipped in the package. */
const CONSOLE_ASSETS = join(packageRoot(), 'assets', 'console');

export interface OpsSurface {
  readonly adminPort: number;
  /** Undefined when the operator surface shares the admin port (`--ops-port -1`). */
  readonly opsPort: number | undefined;
  /** The SSE watch; closed when serving stops. */
  readonly watch: SandboxWatch;
}

export interface OpsDeps {
  readonly gatewayId: string;
  readonly core: Core;
  /** Made by the caller; started later (its degraded reasons and leases are read when asked). */
  readonly presence: PresenceStore;
  readonly relayAddress: string;
  readonly serving: Serving;
  readonly log: Logger;
}

type OpsSlice = Pick<Config, 'watchMaxTotal' | 'watchMaxPerPrincipal' | 'watchMaxBufferBytes' | 'listenHost' | 'adminPort' | 'opsPort' | 'opsListenHost' | 'console' | 'apiKeyHeader' | 'presence'>;

export async function startOpsSurface(life: Lifecycle, config: OpsSlice, deps: OpsDeps): Promise<OpsSurface> {
  const { gatewayId, core, presence, serving, log } = deps;
  const { view, metrics, keyStore } = core;
  const certificates = core.certificates.store;
  const readiness: Readiness = {
    notReady() {
      const reasons = view.unsyncedDrivers().map((d) => `driver ${d} has not synced`);
      if (serving.shuttingDown) reasons.push('shutting down');
      return reasons;
    },
    degraded: () => [...presence.degraded(), ...(keyStore?.degraded() ?? []), ...(certificates?.problems() ?? [])],
  };
  metrics.watchReadiness({
    notReady: () => readiness.notReady(),
    presenceDegraded: () => presence.degraded(),
    keysDegraded: () => keyStore?.degraded() ?? [],
    tlsDegraded: () => certificates?.problems() ?? [],
  });
  const watch = new SandboxWatch(view, core.activityLog, { maxTotal: config.watchMaxTotal, maxPerPrincipal: config.watchMaxPerPrincipal, maxBufferBytes: config.watchMaxBufferBytes });
  metrics.watchWatchers(watch);
  const apiDeps = {
    view,
    activity: core.activityLog,
    registry: metrics.registry,
    readiness,
    watch,
    gatewayId,
    log: log.child({ part: 'api' }),
    auth: core.apiAuth,
    links: core.links?.service,
    console: config.console
      ? createConsole({
          view,
          activity: core.activityLog,
          registry: metrics.registry,
          gatewayId,
          auth: core.apiAuth,
          assets: new ConsoleAssets(CONSOLE_ASSETS, config.apiKeyHeader),
          gateways: consoleGateways(config.presence === 'memory' ? 'memory' : 'redis', presence, gatewayId, deps.relayAddress),
          now: core.now,
        })
      : undefined,
  };
  const separateOps = config.opsPort >= 0;
  const httpAuthz = createHttpAuthz(core.decider, core.door);
  const admin = adminServer(createAdminApi(apiDeps, separateOps ? 'health' : 'all'), httpAuthz, new RequestGuard('admin', log, metrics.handlerErrors('admin')), core.certificates.doors);
  const adminFront = new AuthzFront(admin, httpAuthz, log.child({ part: 'admin' }), core.certificates.doors === undefined ? 'connection' : 'secureConnection');
  const adminAt = { host: config.listenHost, port: config.adminPort };
  const adminPort = await startListener(life, '--admin-port', adminAt, () => listenOn(admin, adminAt.host, adminAt.port, core.listeners.for('admin')), (_, ms) => closeGracefully(admin, ms, adminFront));
  if (!separateOps) return { adminPort, opsPort: undefined, watch };
  const ops = adminServer(createAdminApi(apiDeps, 'operator'), undefined, new RequestGuard('ops', log, metrics.handlerErrors('ops')), core.certificates.ops);
  const opsAt = { host: config.opsListenHost !== '' ? config.opsListenHost : config.listenHost, port: config.opsPort };
  const opsPort = await startListener(life, '--ops-port', opsAt, () => listenOn(ops, opsAt.host, opsAt.port, core.listeners.for('ops')), (_, ms) => closeGracefully(ops, ms));
  return { adminPort, opsPort, watch };
}

/**
 * The admin port's server (HTTP authz under /authz/ when `authz` is given, then `api`) or the ops port's
 * (`api` only). CONNECT gets a typed 405 rather than a closed socket.
 */
function adminServer(api: (req: IncomingMessage, res: ServerResponse) => Promise<void>, authz: HttpAuthz | undefined, guard: RequestGuard, tls: ServerTls | undefined): Server {
  const handler = (req: IncomingMessage, res: ServerResponse): void =>
    guard.run(req, res, () => {
      const url = req.url ?? '/';
      if (authz !== undefined && isAuthzPath(url)) return authz.handle(req, res);
      api(req, res).catch((err: unknown) => guard.fail(err, req, res));
    });
  const server = tls === undefined ? createServer(handler) : secureServer(tls, handler);
  server.keepAliveTimeout = 65_000;
  refuseConnect(server, authz !== undefined ? PROXIED_METHODS : 'GET, HEAD');
  return server;
}

function secureServer(tls: ServerTls, handler: (req: IncomingMessage, res: ServerResponse) => void): Server {
  const server = createHttpsServer(tls.options, handler);
  tls.attach(server);
  return server;
}

/** The console's gateways view: the live leases of the presence store, this gateway's own always listed. */
function consoleGateways(kind: 'memory' | 'redis', presence: PresenceStore, gatewayId: string, relayAddress: string): GatewaysSource {
  return {
    presence: kind,
    leases() {
      const leases: GatewayLease[] = (presence.gatewayLeases?.() ?? []).map((l) => ({ gatewayId: l.gatewayId, relay: l.info.relay, expiresInMs: l.expiresInMs }));
      if (!leases.some((l) => l.gatewayId === gatewayId)) leases.push({ gatewayId, relay: relayAddress, expiresInMs: undefined });
      return leases;
    },
    degraded: () => presence.degraded(),
  };
}

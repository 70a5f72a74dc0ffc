import { hostname } from 'node:os';
import { setLogger } from '@grpc/grpc-js';
import type { DestinationStream } from 'pino';
import { createPresenceStore } from './config/factories.js';
import { redacted } from './config/load.js';
import type { Config } from './config/schema.js';
import { tracingSettings } from './config/tracing-settings.js';
import type { Driver } from './drivers/driver.js';
import { createActivity, startActivity, type ActivityRounds } from './gateway/activity.js';
import { createCore, Serving, startExchangeReaders, startDrivers, startServing } from './gateway/core.js';
import { readCredentials, startCertificates, startCredentialStores } from './gateway/credentials.js';
import { startEnvoyDoor, startProxyDoor, startRelayDoor } from './gateway/doors.js';
import { startOpsSurface } from './gateway/ops-surface.js';
import { SessionStreams, startSessions } from './gateway/sessions.js';
import { deadlineIn, Lifecycle, once, type StopProblem } from './lib/lifecycle.js';
import { createLogger, type Logger } from './observability/logger.js';
import type { GatewayMetrics } from './observability/metrics.js';
import type { ActivityLog } from './lifecycle/activity-log.js';
import type { Tracing } from './observability/otel-tracer.js';
import { startTracing } from './observability/tracing.js';
import type { PresenceStore } from './sessions/presence/presence-store.js';
import type { SupervisorServer } from './sessions/supervisor-server.js';
import type { SupervisorKeys } from './sessions/supervisor-token.js';
import type { SandboxView } from './view/sandbox-view.js';

/**
 * Wiring: one gateway process as a composition of components (src/gateway/): the core (view, drivers,
 * decider, credentials), the doors, the ops surface and the sessions. Each is built from its slice of
 * the configuration and hands back what it started. They start in order and stop in reverse, so the
 * listeners start first and close last (traffic keeps flowing through the supervisors' hand-over), and
 * a failure at any step stops whatever had started. Every stop shares one deadline, `--shutdown-timeout-ms`.
 */

export interface GatewayOptions {
  readonly config: Config;
  /** Log sink (tests pass a MemoryLogSink); default stdout. */
  readonly logDestination?: DestinationStream;
  /** Drivers to use instead of the ones the configuration names. */
  readonly drivers?: readonly Driver[];
  /** Clock (epoch ms); tests pass a fake one. */
  readonly now?: () => number;
  /** Supervisor token keys to use instead of the configured secret (the demo generates its own). */
  readonly supervisorKeys?: SupervisorKeys;
}

export interface Gateway {
  readonly config: Config;
  readonly gatewayId: string;
  readonly view: SandboxView;
  readonly log: Logger;
  readonly metrics: GatewayMetrics;
  /** Undefined unless the tracing options (`OTEL_*`) turn tracing on. */
  readonly tracing: Tracing | undefined;
  readonly drivers: readonly Driver[];
  readonly presence: PresenceStore;
  /** Undefined when no supervisor secret is configured (the endpoint is off). */
  readonly supervisors: SupervisorServer | undefined;
  readonly grpcPort: number;
  readonly adminPort: number;
  /** The operator surface's own port; undefined when it shares the admin port (`--ops-port -1`). */
  readonly opsPort: number | undefined;
  readonly supervisorPort: number | undefined;
  /** Undefined when the embedded proxy is off (`--no-proxy`). */
  readonly proxyPort: number | undefined;
  /** The proxy's TLS port; undefined without `--proxy-tls-port`. */
  readonly proxyTlsPort: number | undefined;
  readonly relayPort: number;
  /** `host:port` of the relay listener, as published in this gateway's lease. */
  readonly relayAddress: string;
  /** Activity reports and idle pause (their rounds run on timers; tests also run them by hand). */
  readonly lifecycle: ActivityRounds;
  /** Traffic activity per sandbox and port, and the idle controller's decisions. */
  readonly activity: ActivityLog;
  /** Graceful shutdown within `--shutdown-timeout-ms`: NOT_SERVING, stop drivers, hand sessions over, close listeners. */
  close(): Promise<void>;
}

export async function startGateway(opts: GatewayOptions): Promise<Gateway> {
  const config = opts.config;
  const gatewayId = config.gatewayId !== '' ? config.gatewayId : `${hostname()}-${process.pid}`;
  const log = createLogger(config.logLevel, opts.logDestination).child({ gatewayId });
  log.info({ config: redacted(config) }, 'configuration');
  // grpc-js (the client of remote drivers) prints its own errors on stderr; they belong in the log at debug.
  const grpcLog = log.child({ part: 'grpc' });
  setLogger({ error: (...a: unknown[]) => grpcLog.debug(a.join(' ')), info: (...a: unknown[]) => grpcLog.debug(a.join(' ')), debug: (...a: unknown[]) => grpcLog.debug(a.join(' ')) });

  const now = opts.now ?? Date.now;
  const core = createCore(config, gatewayId, log, await readCredentials(config, log, { supervisorKeys: opts.supervisorKeys, now }), { drivers: opts.drivers, now, tracing: await startTracing(tracingSettings(config), gatewayId) });
  const lifecycle = createActivity(config, core, gatewayId, log);
  const onProblem = (p: StopProblem): void =>
    p.err === undefined ? log.warn({ component: p.component }, 'stop overran the shutdown deadline; abandoned') : log.warn({ err: p.err, component: p.component }, 'stop failed');
  const life = new Lifecycle(onProblem);
  const streams = new SessionStreams();
  try {
    await startExchangeReaders(life, core);
    await startCertificates(life, core.certificates.store);
    // Listeners first, so they close last.
    const relay = await startRelayDoor(life, config, core, streams, log);
    const presence = createPresenceStore(config, gatewayId, log.child({ part: 'presence' }), {
      relay: relay.address,
      ...(config.supervisorPublicUrl === '' ? {} : { supervisor: config.supervisorPublicUrl }),
    });
    const envoy = await startEnvoyDoor(life, config, core, log);
    const serving = new Serving(core.view, envoy);
    const ops = await startOpsSurface(life, config, { gatewayId, core, presence, relayAddress: relay.address, serving, log });
    const proxy = await startProxyDoor(life, config, core, gatewayId, streams, log);
    await startCredentialStores(life, core);
    const supervisors = await startSessions(life, config, { gatewayId, core, presence, relayAddress: relay.address, keysGiven: opts.supervisorKeys !== undefined, streams, log });
    await startDrivers(life, core, serving, log);
    await startActivity(life, lifecycle);
    await startServing(life, serving, core.view, ops.watch);

    const ports = { grpcPort: envoy.port, adminPort: ops.adminPort, opsPort: ops.opsPort, supervisorPort: supervisors?.port, proxyPort: proxy?.port, proxyTlsPort: proxy?.tlsPort, relayPort: relay.port };
    log.info({ ...ports, relayAddress: relay.address, presence: presence.kind, drivers: core.drivers.map((d) => d.id) }, 'sandgate started');
    const close = once(async () => {
      await life.stop(deadlineIn(config.shutdownTimeoutMs));
      log.info('sandgate stopped');
    });
    return { config, gatewayId, view: core.view, log, metrics: core.metrics, tracing: core.tracing, drivers: core.drivers, presence, supervisors, ...ports, relayAddress: relay.address, lifecycle, activity: core.activityLog, close };
  } catch (err) {
    await life.stop(deadlineIn(config.shutdownTimeoutMs));
    throw err;
  }
}

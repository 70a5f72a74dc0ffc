import { createHmac } from 'node:crypto';
import type { SandboxWatch } from '../api/sandbox-watch.js';
import { connectionLimits, driversFromConfig, redisPresenceOptions, routeOptions } from '../config/factories.js';
import type { Config } from '../config/schema.js';
import { startFailed } from '../config/start-errors.js';
import { namespaceShare } from '../domain/namespace-share.js';
import { sandboxKey } from '../domain/sandbox.js';
import type { Driver, DriverSink } from '../drivers/driver.js';
import { Decider } from '../edge/decider.js';
import type { GrpcFrontDoor } from '../edge/envoy/grpc-server.js';
import { removedHeaders, strippedCredentials, type DoorOptions } from '../edge/headers.js';
import { resolveRelayAddress } from '../edge/relay/relay-config.js';
import { ActivityLog } from '../lifecycle/activity-log.js';
import { ActivityDemand, ActivityRecorder, ignorePattern } from '../lifecycle/activity-recorder.js';
import { Resumer } from '../lifecycle/resumer.js';
import { ListenerGuards } from '../lib/connection-guard.js';
import type { Lifecycle } from '../lib/lifecycle.js';
import type { ReloadEvent } from '../lib/tls/certificate-store.js';
import type { Logger } from '../observability/logger.js';
import { AccessLog, accessLogTarget } from '../observability/access-log.js';
import { ExchangeRecorder, type ExchangeSink } from '../observability/exchange.js';
import { metricsNamespaces, NamespaceFigures } from '../observability/namespace-figures.js';
import { GatewayMetrics } from '../observability/metrics.js';
import type { Tracing } from '../observability/otel-tracer.js';
import { SandboxView } from '../view/sandbox-view.js';
import { readCertificates, type Certificates, type Credentials } from './credentials.js';

/**
 * The gateway's core: the view, the drivers that feed it, the decider every door asks, with the
 * credentials and certificates the doors and sessions check. Built before anything listens or connects,
 * so everything a configuration can get wrong fails here with nothing to undo.
 */
export interface Core extends Credentials {
  /** Clock (epoch ms). */
  readonly now: () => number;
  readonly view: SandboxView;
  /** `--access-log`; undefined when off. */
  readonly accessLog: AccessLog | undefined;
  /** Undefined unless the tracing options (`OTEL_*`) turn tracing on. */
  readonly tracing: Tracing | undefined;
  /** The doors' exchange records; undefined (none made at all) unless one of their readers is on. */
  readonly recorder: ExchangeRecorder | undefined;
  /** What every door records traffic into (per sandbox and port), while something reads it. */
  readonly activity: ActivityRecorder;
  /** Traffic activity per sandbox and port, and the idle controller's decisions. */
  readonly activityLog: ActivityLog;
  /** Whether anything reads activity (recording and the lifecycle writer's lock run only then). */
  readonly activityDemand: ActivityDemand;
  readonly metrics: GatewayMetrics;
  readonly drivers: readonly Driver[];
  readonly decider: Decider;
  /** Auto-resume and `--max-running-per-namespace`, which the lifecycle channel shares between gateways. */
  readonly resumer: Resumer;
  /** What every door strips, which header carries the upstream, and the relay hop's credentials. */
  readonly door: DoorOptions;
  readonly certificates: Certificates;
  /** Every listener's guard (connection cap, handshake and first-request timeouts), from one set of limits. */
  readonly listeners: ListenerGuards;
}

export interface CoreOptions {
  /** Drivers to use instead of the ones the configuration names. */
  readonly drivers?: readonly Driver[];
  /** Clock (epoch ms). */
  readonly now: () => number;
  /** The OpenTelemetry tracer, when the tracing options turn it on (config/tracing-settings.ts). */
  readonly tracing: Tracing | undefined;
}

export function createCore(config: Config, gatewayId: string, log: Logger, credentials: Credentials, opts: CoreOptions): Core {
  redisPresenceOptions(config);
  if (config.relayAdvertiseAddress !== '') resolveRelayAddress(config.relayAdvertiseAddress, config.listenHost, 0);
  const { tokenSecret, apiKeys, policy } = credentials;
  const accessLogTo = accessLogTarget(config.accessLog);
  const accessLog = accessLogTo === undefined ? undefined : new AccessLog(accessLogTo, gatewayId);
  const tracing = opts.tracing;
  const namespaces = metricsNamespaces(config.metricsNamespaces);
  const now = opts.now;
  const ignore = ignorePattern(config.activityIgnore);
  const view = new SandboxView({
    now,
    tombstoneTtlMs: config.tombstoneTtlMs,
    waiters: { perSandbox: config.waitersPerSandbox, total: config.waitersTotal, perNamespace: namespaceShare(config.waitersPerNamespace, config.waitersTotal) },
    deriveToken: tokenSecret === undefined ? undefined : (id) => createHmac('sha256', tokenSecret).update(id).digest('hex'),
  });
  const metrics = new GatewayMetrics(view);
  const listeners = new ListenerGuards(connectionLimits(config));
  metrics.watchListeners(listeners);
  const sinks: ExchangeSink[] = [];
  if (accessLog !== undefined) sinks.push(accessLog);
  if (namespaces.length > 0) sinks.push(new NamespaceFigures(metrics.registry, namespaces));
  // Absent unless one of its readers is on: the doors then make no exchange records at all.
  const recorder = sinks.length === 0 && tracing === undefined ? undefined : new ExchangeRecorder(sinks, tracing);
  const tlsLog = log.child({ part: 'tls' });
  const certificates = readCertificates(config, (e: ReloadEvent) => {
    metrics.tlsReloads.labels(e.result).inc();
    if (e.result === 'failed') tlsLog.warn({ err: e.error, source: e.source, code: 'tls_certificate_invalid' }, `TLS certificate ${e.source} not loaded; the last good pair keeps serving: ${e.error?.message ?? ''}`);
    else tlsLog.info({ source: e.source }, `TLS certificate ${e.source} ${e.result}`);
  });
  const driverLog = log.child({ part: 'drivers' });
  const drivers = opts.drivers ?? driversFromConfig(config, gatewayId, driverLog);
  const activityLog = new ActivityLog(view, config.idleTimeout);
  const activityDemand = new ActivityDemand({
    idle: config.idleTimeout > 0,
    reports: config.activityReports && drivers.some((d) => d.reportActivity !== undefined),
    shown: config.console || namespaces.length > 0,
  });
  const activity = new ActivityRecorder(activityLog, activityDemand, ignore, now);
  const resumer = new Resumer({
    view,
    resume: (driverId, ns, name) => resumeVia(drivers, driverId, ns, name),
    defaultPolicy: config.autoResume,
    log: log.child({ part: 'resume' }),
    maxRunningPerNamespace: config.maxRunningPerNamespace,
    wakeBudgetMs: config.readinessWaitMs,
    now,
  });
  const decider = new Decider({
    view,
    route: routeOptions(config),
    readinessWaitMs: config.readinessWaitMs,
    metrics,
    log: log.child({ part: 'edge' }),
    auth: {
      keys: apiKeys,
      apiKeyHeader: config.apiKeyHeader,
      policy,
      tokenHeaders: config.trafficTokenHeaders,
      envdTokenHeader: config.envdTokenHeader,
      envdPort: config.envdPort,
      links: credentials.links?.auth,
      policies: credentials.accessPolicies,
      jwt: credentials.jwt,
    },
    resumer,
    recorder,
    activity,
  });
  view.onIdRefused((r) => {
    metrics.refusedIds.labels(r.driver, r.reason).inc();
    const sandbox = sandboxKey(r.namespace, r.name);
    driverLog.warn(r, r.reason === 'in_use' ? `sandbox ${sandbox} declares id ${r.id}, held by ${r.holder ?? 'another sandbox'}: refused` : `sandbox ${sandbox} declares id ${r.id}, the <namespace>--<name> id of another sandbox: refused`);
  });
  for (const d of drivers) view.registerDriver(d.id);
  return {
    ...credentials,
    now,
    accessLog,
    tracing,
    recorder,
    view,
    activity,
    activityLog,
    activityDemand,
    metrics,
    drivers,
    decider,
    resumer,
    door: { upstreamHeader: config.upstreamHeader, removeHeaders: removedHeaders(strippedCredentials(config.stripCredentials, credentials.jwt !== undefined)), relay: credentials.relayCredentials, linkCookie: credentials.links !== undefined },
    certificates,
    listeners,
  };
}

function resumeVia(drivers: readonly Driver[], driverId: string, namespace: string, name: string): Promise<void> {
  const d = drivers.find((x) => x.id === driverId);
  if (d?.resume === undefined) return Promise.reject(new Error(`driver ${driverId} cannot resume sandboxes`));
  return d.resume(namespace, name);
}

/**
 * First to start and last to stop: every listener has closed before the access log's last flush and
 * before the spans of the last requests are exported.
 */
export async function startExchangeReaders(life: Lifecycle, { accessLog, tracing }: Pick<Core, 'accessLog' | 'tracing'>): Promise<void> {
  if (accessLog !== undefined) {
    await life.start(
      'access log',
      () => accessLog.ready().catch((err: unknown) => Promise.reject(startFailed('--access-log', 'the access log', err))),
      () => accessLog.close(),
    );
  }
  if (tracing !== undefined) await life.start('tracing', () => undefined, () => tracing.close());
}

/** Starts every driver, each feeding the view; a driver's full list may make the gateway serving. */
export async function startDrivers(life: Lifecycle, core: Core, serving: Serving, log: Logger): Promise<void> {
  const driverLog = log.child({ part: 'drivers' });
  for (const d of core.drivers) {
    await life.start(
      `driver ${d.id}`,
      () => d.start(driverSink(d, core, serving, driverLog)).catch((err: unknown) => Promise.reject(startFailed(driverFlag(d.id), `driver ${d.id}`, err))),
      () => d.stop().catch((err: unknown) => driverLog.warn({ err, driver: d.id }, 'driver stop failed')),
    );
  }
}

function driverSink(d: Driver, { view, metrics }: Core, serving: Serving, driverLog: Logger): DriverSink {
  // Bound once: a busy driver's events must not format label sets one by one.
  const applied = metrics.driverEventCounter(d.id, 'applied');
  const stale = metrics.driverEventCounter(d.id, 'stale');
  return {
    replace(snapshots) {
      view.replace(d.id, snapshots);
      metrics.driverEvents.labels(d.id, 'resync').inc();
      driverLog.info({ driver: d.id, sandboxes: snapshots.length }, 'driver list applied');
      serving.announceIfSynced();
    },
    apply(event) {
      (view.apply(d.id, event) ? applied : stale).inc();
    },
    error(err) {
      metrics.driverErrors.labels(d.id).inc();
      driverLog.warn({ driver: d.id, err }, err.message);
    },
  };
}

/** The option that configures a driver, by its id (`file`, `kubernetes/…`, or a grpc:// driver's name). */
function driverFlag(id: string): string {
  if (id === 'file') return '--sandboxes';
  return id.startsWith('grpc/') ? '--drivers' : '--kubernetes';
}

/**
 * Whether this gateway tells Envoy it serves (gRPC health SERVING): once every driver has delivered its
 * full list, and no longer from the moment shutdown begins.
 */
export class Serving {
  private stopping = false;

  constructor(
    private readonly view: SandboxView,
    private readonly envoy: GrpcFrontDoor,
  ) {}

  get shuttingDown(): boolean {
    return this.stopping;
  }

  announceIfSynced(): void {
    if (this.view.synced && !this.stopping) this.envoy.setServing(true);
  }

  withdraw(): void {
    this.stopping = true;
    this.envoy.setServing(false);
  }
}

/**
 * Last to start, first to stop: serving is announced only once everything runs, and withdrawn before
 * anything goes (Envoy's health checks move traffic away first). The view's clock ticks meanwhile.
 */
export async function startServing(life: Lifecycle, serving: Serving, view: SandboxView, watch: SandboxWatch): Promise<void> {
  await life.start(
    'serving',
    () => {
      serving.announceIfSynced();
      const tick = setInterval(() => view.tick(), 1000);
      tick.unref();
      return tick;
    },
    (tick) => {
      serving.withdraw();
      clearInterval(tick);
      view.waiters.close();
      watch.close();
    },
  );
}

import { createHmac } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { setLogger } from '@grpc/grpc-js';
import type { DestinationStream } from 'pino';
import { createAdminApi, type Readiness } from './api/admin-api.js';
import type { ApiAuth } from './api/api-access.js';
import { ConsoleAssets } from './api/console/console-assets.js';
import { createConsole, type GatewayLease, type GatewaysSource } from './api/console/console-api.js';
import { SandboxWatch } from './api/sandbox-watch.js';
import { ApiKeyAuth } from './auth/api-keys.js';
import { LinkKeyFile, readLinkKeys } from './auth/link-keys.js';
import { LinkService } from './auth/link-service.js';
import { LinkAuth } from './auth/link-tokens.js';
import { apiKeyStoreFromConfig, linkMaxTtlFromConfig, certificateStoreFromConfig, createPresenceStore, doorsCertificatesFromConfig, supervisorCertificatesFromConfig, driversFromConfig, keyPolicy, redisPresenceOptions, routeOptions } from './config/factories.js';
import { grpcLimits } from './config/factories.js';
import { redacted } from './config/load.js';
import { packageRoot } from './lib/package-root.js';
import type { CertificateStore, ReloadEvent } from './lib/tls/certificate-store.js';
import type { Config } from './config/schema.js';
import { relaySecretFromConfig, secretBytes, supervisorKeysFromConfig } from './config/secrets.js';
import { listenFailed, startFailed } from './config/start-errors.js';
import { SandgateError } from './domain/errors.js';
import type { Driver, DriverSink } from './drivers/driver.js';
import { Decider } from './edge/decider.js';
import { startGrpcServer, type GrpcFrontDoor } from './edge/envoy/grpc-server.js';
import { removedHeaders, type DoorOptions } from './edge/headers.js';
import { AuthzFront } from './edge/authz-front.js';
import { createHttpAuthz, isAuthzPath, type HttpAuthz } from './edge/http-authz.js';
import { EmbeddedProxy } from './edge/proxy/http-proxy.js';
import { resolveRelayAddress } from './edge/relay/relay-config.js';
import { RelayCredentials } from './edge/relay/relay-credential.js';
import { RelayListener } from './edge/relay/relay-listener.js';
import { Resumer } from './edge/resume.js';
import { closeGracefully, listenOn, PROXIED_METHODS, refuseConnect, type ServerTls } from './lib/http-listen.js';
import { RequestGuard } from './lib/request-guard.js';
import { namespaceShare } from './domain/namespace-share.js';
import { deadlineIn, startAll, stopAll, type Component, type Deadline, type StopProblem } from './lib/lifecycle.js';
import { createLogger, type Logger } from './observability/logger.js';
import { GatewayMetrics } from './observability/metrics.js';
import { AccessLog, accessLogTarget } from './observability/access-log.js';
import { ExchangeRecorder, type ExchangeSink } from './observability/exchange.js';
import { metricsNamespaces, NamespaceFigures } from './observability/namespace-figures.js';
import { tracingFromEnv, type Tracing } from './observability/tracing.js';
import type { PresenceRecord, PresenceStore } from './sessions/presence/presence-store.js';
import { RelayError } from './sessions/relay-stream.js';
import type { RelayOpener } from './sessions/relay-opener.js';
import { SupervisorServer } from './sessions/supervisor-server.js';
import type { SupervisorKeys } from './sessions/supervisor-token.js';
import { SandboxView } from './view/sandbox-view.js';
import { sandboxKey } from './domain/sandbox.js';
import { parseDuration } from './domain/duration.js';
import { ActivityRecorder, ignorePattern } from './edge/activity-recorder.js';
import { ActivityReporter } from './edge/activity-reporter.js';
import { IdleController } from './edge/idle-controller.js';
import { redisTarget } from './lib/redis-connection.js';
import { LocalLifecycleChannel, RedisLifecycleChannel, type LifecycleChannel } from './sessions/presence/lifecycle-channel.js';

/**
 * Wiring: one gateway process — the view, its drivers, the front doors and the admin API — as one list
 * of components (src/lib/lifecycle.ts). They start in order and stop in reverse, so the listeners start
 * first and close last (traffic keeps flowing through the supervisors' hand-over), and a failure at any
 * step stops whatever had started. Every stop shares one deadline, `--shutdown-timeout-ms`.
 */

/** The console's page, scripts and styles, shipped in the package. */
const CONSOLE_ASSETS = join(packageRoot(), 'assets', 'console');

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
  /** Undefined unless the `OTEL_*` environment turns tracing on. */
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
  readonly lifecycle: { readonly reporter: ActivityReporter; readonly idle: IdleController };
  /** Graceful shutdown within `--shutdown-timeout-ms`: NOT_SERVING, stop drivers, hand sessions over, close listeners. */
  close(): Promise<void>;
}

/** A listener as a component: its bind failure becomes one `listen_failed` sentence naming `portFlag`. */
function listener(portFlag: string, host: string, port: number, start: () => Promise<unknown>, close: (graceMs: number) => Promise<void>): Component {
  return {
    name: portFlag,
    async start() {
      try {
        await start();
      } catch (err) {
        throw listenFailed(portFlag, host, port, err);
      }
    },
    stop: (deadline) => close(deadline.remainingMs()),
  };
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
  let server: Server;
  if (tls === undefined) server = createServer(handler);
  else {
    const https = createHttpsServer(tls.options, handler);
    tls.attach(https);
    server = https;
  }
  server.keepAliveTimeout = 65_000;
  refuseConnect(server, authz !== undefined ? PROXIED_METHODS : 'GET, HEAD');
  return server;
}

/**
 * The console's gateways view: the live leases of the presence store (read when asked: the store is made
 * by its component's start), this gateway's own always listed.
 */
function consoleGateways(kind: 'memory' | 'redis', current: () => PresenceStore | undefined, gatewayId: string, relayAddress: () => string): GatewaysSource {
  return {
    presence: kind,
    leases() {
      const leases: GatewayLease[] = (current()?.gatewayLeases?.() ?? []).map((l) => ({ gatewayId: l.gatewayId, relay: l.info.relay, expiresInMs: l.expiresInMs }));
      if (!leases.some((l) => l.gatewayId === gatewayId)) leases.push({ gatewayId, relay: relayAddress(), expiresInMs: undefined });
      return leases;
    },
    degraded: () => current()?.degraded() ?? [],
  };
}

/** `--idle-timeout` in ms (0 = off). Throws `config_invalid`. */
function idleTimeoutFromConfig(config: Config): number {
  if (config.idleTimeout === '') return 0;
  const ms = parseDuration(config.idleTimeout);
  if (typeof ms === 'string') throw new SandgateError('config_invalid', `idle-timeout: ${ms}`);
  return ms;
}

/** Shares activity and the lifecycle writer between gateways: through the presence Redis, or none for one gateway. */
function lifecycleChannel(config: Config, gatewayId: string, log: Logger): LifecycleChannel {
  if (config.presence === 'memory') return new LocalLifecycleChannel();
  return new RedisLifecycleChannel({
    target: redisTarget(config.presence, config.presenceRedisOptions, 'presence (memory or a Redis URL)'),
    gatewayId,
    keyPrefix: config.presenceKeyPrefix,
    ttlMs: config.leaseTtlMs,
    log,
  });
}

function resumeVia(drivers: readonly Driver[], driverId: string, namespace: string, name: string): Promise<void> {
  const d = drivers.find((x) => x.id === driverId);
  if (d?.resume === undefined) return Promise.reject(new Error(`driver ${driverId} cannot resume sandboxes`));
  return d.resume(namespace, name);
}

/** Resolves once every sandbox in `held` shows a session on another gateway, or after `ms`. */
function awaitTakeover(presence: PresenceStore, gatewayId: string, held: readonly PresenceRecord[], ms: number): Promise<void> {
  const pending = new Set(held.map((r) => sandboxKey(r.namespace, r.name)));
  for (const r of held) if (presence.get(r.namespace, r.name)?.gatewayId !== gatewayId) pending.delete(sandboxKey(r.namespace, r.name));
  if (pending.size === 0) return Promise.resolve();
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      off();
      resolve();
    };
    const timer = setTimeout(done, ms);
    const off = presence.onChange((ns, name, record) => {
      if (record !== undefined && record.gatewayId !== gatewayId) pending.delete(ns + '/' + name);
      if (pending.size === 0) done();
    });
  });
}

function presenceOf(r: PresenceRecord | undefined) {
  return r === undefined ? undefined : { gatewayId: r.gatewayId, sessionId: r.sessionId, instanceId: r.instanceId, epoch: r.epoch, since: r.since };
}

export async function startGateway(opts: GatewayOptions): Promise<Gateway> {
  const config = opts.config;
  const gatewayId = config.gatewayId !== '' ? config.gatewayId : `${hostname()}-${process.pid}`;
  const log = createLogger(config.logLevel, opts.logDestination).child({ gatewayId });
  log.info({ config: redacted(config) }, 'configuration');
  // grpc-js (the client of remote drivers) prints its own errors on stderr; they belong in the log at debug.
  const grpcLog = log.child({ part: 'grpc' });
  setLogger({ error: (...a: unknown[]) => grpcLog.debug(a.join(' ')), info: (...a: unknown[]) => grpcLog.debug(a.join(' ')), debug: (...a: unknown[]) => grpcLog.debug(a.join(' ')) });

  // Everything a configuration can get wrong is checked here, before anything listens or connects.
  const tokenSecret = secretBytes(config.trafficTokenSecret, config.trafficTokenSecretFile, 'traffic-token-secret');
  const keys = opts.supervisorKeys ?? supervisorKeysFromConfig(config);
  const relaySecret = relaySecretFromConfig(config);
  // The secret stays in this process: every relay hop carries a credential bound to one target.
  const relayCredentials = new RelayCredentials(relaySecret.secret, config.relayCredentialTtlMs);
  redisPresenceOptions(config);
  if (config.relayAdvertiseAddress !== '') resolveRelayAddress(config.relayAdvertiseAddress, config.listenHost, 0);
  const authLog = log.child({ part: 'auth' });
  const keyStore = apiKeyStoreFromConfig(config, (err) => authLog.warn({ err }, 'API key store problem'));
  const pepper = keyStore === undefined ? undefined : secretBytes(config.keyPepper, config.keyPepperFile, 'key-pepper');
  if (keyStore !== undefined && pepper === undefined) throw new SandgateError('config_invalid', 'an API key store needs a pepper: set --key-pepper-file or SANDGATE_KEY_PEPPER');

  const accessLogTo = accessLogTarget(config.accessLog);
  const accessLog = accessLogTo === undefined ? undefined : new AccessLog(accessLogTo, gatewayId);
  const tracing = tracingFromEnv(process.env, gatewayId);
  const namespaces = metricsNamespaces(config.metricsNamespaces);

  const now = opts.now ?? Date.now;
  // Signed links: the key file is read now, so a bad one stops start-up; then watched.
  const linkMaxTtl = linkMaxTtlFromConfig(config);
  const linkKeys = config.linkKeysFile === '' ? undefined : new LinkKeyFile(config.linkKeysFile, await readLinkKeys(config.linkKeysFile), (err) => authLog.warn({ err }, 'link keys problem'));
  const links = linkKeys === undefined ? undefined : new LinkAuth(() => linkKeys.current, keyStore ?? { isLinkRevoked: () => false }, linkMaxTtl, now);
  linkKeys?.onChange(() => links!.keysChanged());
  const idleTimeoutMs = idleTimeoutFromConfig(config);
  const ignore = ignorePattern(config.activityIgnore);
  const view = new SandboxView({
    now,
    tombstoneTtlMs: config.tombstoneTtlMs,
    waiters: { perSandbox: config.waitersPerSandbox, total: config.waitersTotal, perNamespace: namespaceShare(config.waitersPerNamespace, config.waitersTotal) },
    deriveToken: tokenSecret === undefined ? undefined : (id) => createHmac('sha256', tokenSecret).update(id).digest('hex'),
  });
  view.activity.defaultIdleTimeoutMs = idleTimeoutMs;
  const activity = new ActivityRecorder(view.activity, ignore, now);
  const metrics = new GatewayMetrics(view);
  const sinks: ExchangeSink[] = [];
  if (accessLog !== undefined) sinks.push(accessLog);
  if (namespaces.length > 0) sinks.push(new NamespaceFigures(metrics.registry, namespaces));
  // Absent unless one of its readers is on: the doors then make no exchange records at all.
  const recorder = sinks.length === 0 && tracing === undefined ? undefined : new ExchangeRecorder(sinks, tracing);
  const tlsLog = log.child({ part: 'tls' });
  const onTlsReload = (e: ReloadEvent): void => {
    metrics.tlsReloads.labels(e.result).inc();
    if (e.result === 'failed') tlsLog.warn({ err: e.error, source: e.source, code: 'tls_certificate_invalid' }, `TLS certificate ${e.source} not loaded; the last good pair keeps serving: ${e.error?.message ?? ''}`);
    else tlsLog.info({ source: e.source }, `TLS certificate ${e.source} ${e.result}`);
  };
  const certificates = certificateStoreFromConfig(config, onTlsReload);
  const supervisorCertificates = supervisorCertificatesFromConfig(config, certificates, onTlsReload);
  const doorsCertificates = doorsCertificatesFromConfig(config, onTlsReload);
  const doorsTls = serverTls(doorsCertificates);
  // The ops port: TLS with the doors' pair, no client certificate (kubelet probes cannot present one; the
  // operator API has its API keys).
  const opsTls = serverTls(doorsCertificates, false);
  // Every store once (the supervisor endpoint may share the proxy's).
  const certificateStores = [...new Set([certificates, supervisorCertificates, doorsCertificates])].filter((s): s is CertificateStore => s !== undefined);
  const proxyTls = config.proxy && config.proxyTlsPort >= 0 && certificates !== undefined ? { port: config.proxyTlsPort, store: certificates } : undefined;
  if (config.proxy && config.proxyRedirectHttpsPort === 0 && proxyTls === undefined) throw new SandgateError('config_invalid', '--proxy-redirect-https-port 0 redirects to --proxy-tls-port, which is off');
  if (config.proxy && config.proxyPort < 0 && proxyTls === undefined) throw new SandgateError('config_invalid', '--proxy-port -1 turns the plain listener off: set --proxy-tls-port, or --no-proxy');
  const driverLog = log.child({ part: 'drivers' });
  const drivers = opts.drivers ?? driversFromConfig(config, gatewayId, driverLog);
  const apiKeys = keyStore === undefined ? undefined : new ApiKeyAuth(keyStore, pepper!, config.adminTeam);
  const policy = keyPolicy(config.apiKeyNamespaces);
  const resumer = new Resumer(view, (driverId, ns, name) => resumeVia(drivers, driverId, ns, name), config.autoResume, log.child({ part: 'resume' }), config.maxRunningPerNamespace);
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
      links,
    },
    resumer,
    recorder,
    activity,
  });
  const door: DoorOptions = { upstreamHeader: config.upstreamHeader, removeHeaders: removedHeaders(config.stripCredentials), relay: relayCredentials, linkCookie: links !== undefined };
  const host = config.listenHost;
  const sessionLog = log.child({ part: 'sessions' });
  let shuttingDown = false;

  // Made by their components' start (each needs what an earlier one produced: the relay address goes
  // into the presence lease, the presence store into the supervisor server).
  let relayAddress = '';
  let presence: PresenceStore | undefined;
  let supervisors: SupervisorServer | undefined;
  let grpc: GrpcFrontDoor | undefined;
  // Relay streams over this gateway's sessions, for the relay listener and the proxy; they exist from
  // the supervisors' start on.
  const sessionStreams: RelayOpener = {
    openRelayStream: (ns, name, port, signal) =>
      supervisors?.openRelayStream(ns, name, port, signal) ?? Promise.reject(new RelayError('no_session', 'the supervisor endpoint is off on this gateway')),
  };

  const relay = new RelayListener(
    sessionStreams,
    { host, port: config.relayPort, credentials: relayCredentials, headersTimeoutMs: config.proxyHeadersTimeoutMs, idleTimeoutMs: config.proxyIdleTimeoutMs, handlerErrors: metrics.handlerErrors('relay'), recorder },
    log.child({ part: 'relay' }),
  );
  const readiness: Readiness = {
    notReady() {
      const reasons = view.unsyncedDrivers().map((d) => `driver ${d} has not synced`);
      if (shuttingDown) reasons.push('shutting down');
      return reasons;
    },
    degraded: () => [...(presence?.degraded() ?? []), ...(keyStore?.degraded() ?? []), ...certificateStores.flatMap((s) => s.problems())],
  };
  metrics.watchReadiness({
    notReady: () => readiness.notReady(),
    presenceDegraded: () => presence?.degraded() ?? [],
    keysDegraded: () => keyStore?.degraded() ?? [],
    tlsDegraded: () => certificateStores.flatMap((s) => s.problems()),
  });
  const watch = new SandboxWatch(view, { maxTotal: config.watchMaxTotal, maxPerPrincipal: config.watchMaxPerPrincipal, maxBufferBytes: config.watchMaxBufferBytes });
  metrics.watchWatchers(watch);
  // The operator API and its console see through the same principals as the doors (docs/tenancy.md).
  const auth: ApiAuth | undefined = apiKeys === undefined ? undefined : { principal: (key) => apiKeys.principal(key), header: config.apiKeyHeader.toLowerCase(), policy };
  const apiDeps = {
    view,
    registry: metrics.registry,
    readiness,
    watch,
    gatewayId,
    log: log.child({ part: 'api' }),
    auth,
    links:
      linkKeys === undefined
        ? undefined
        : new LinkService(() => linkKeys.current, keyStore, linkMaxTtl, { scheme: config.linkScheme, port: config.linkPort, route: routeOptions(config) }, now),
    console: config.console
      ? createConsole({
          view,
          registry: metrics.registry,
          gatewayId,
          auth,
          assets: new ConsoleAssets(CONSOLE_ASSETS, config.apiKeyHeader),
          gateways: consoleGateways(config.presence === 'memory' ? 'memory' : 'redis', () => presence, gatewayId, () => relayAddress),
          now,
        })
      : undefined,
  };
  const separateOps = config.opsPort >= 0;
  const httpAuthz = createHttpAuthz(decider, door);
  const admin = adminServer(createAdminApi(apiDeps, separateOps ? 'health' : 'all'), httpAuthz, new RequestGuard('admin', log, metrics.handlerErrors('admin')), doorsTls);
  const adminFront = new AuthzFront(admin, httpAuthz, log.child({ part: 'admin' }), doorsTls === undefined ? 'connection' : 'secureConnection');
  const ops = separateOps ? adminServer(createAdminApi(apiDeps, 'operator'), undefined, new RequestGuard('ops', log, metrics.handlerErrors('ops')), opsTls) : undefined;
  const opsHost = config.opsListenHost !== '' ? config.opsListenHost : host;
  let adminPort = 0;
  let opsPort: number | undefined;
  const proxy = !config.proxy
    ? undefined
    : new EmbeddedProxy(
        decider,
        {
          host,
          port: config.proxyPort,
          upstreamHeader: config.upstreamHeader,
          stripHeaders: [...config.stripHeaders, ...config.stripCredentials],
          stripOriginOnUpgrade: config.stripOriginOnUpgrade,
          connectTimeoutMs: config.proxyConnectTimeoutMs,
          headersTimeoutMs: config.proxyHeadersTimeoutMs,
          idleTimeoutMs: config.proxyIdleTimeoutMs,
          relay: { gatewayId, credentials: relayCredentials, streams: keys === undefined ? undefined : sessionStreams },
          maxConnectionsPerSandbox: config.maxConnectionsPerSandbox,
          handlerErrors: metrics.handlerErrors('proxy'),
          activity,
          connectRetry: { ms: config.upstreamConnectRetryMs, now },
          tls: proxyTls,
          redirectHttpsPort: config.proxyRedirectHttpsPort,
        },
        log.child({ part: 'proxy' }),
      );

  const sinkFor = (d: Driver): DriverSink => {
    // Bound once: a busy driver's events must not format label sets one by one.
    const applied = metrics.driverEventCounter(d.id, 'applied');
    const stale = metrics.driverEventCounter(d.id, 'stale');
    return {
      replace(snapshots) {
        view.replace(d.id, snapshots);
        metrics.driverEvents.labels(d.id, 'resync').inc();
        driverLog.info({ driver: d.id, sandboxes: snapshots.length }, 'driver list applied');
        if (view.synced && !shuttingDown) grpc?.setServing(true);
      },
      apply(event) {
        (view.apply(d.id, event) ? applied : stale).inc();
      },
      error(err) {
        metrics.driverErrors.labels(d.id).inc();
        driverLog.warn({ driver: d.id, err }, err.message);
      },
    };
  };
  view.onIdRefused((r) => {
    metrics.refusedIds.labels(r.driver, r.reason).inc();
    driverLog.warn(r, r.reason === 'in_use' ? `sandbox ${sandboxKey(r.namespace, r.name)} declares id ${r.id}, held by ${r.holder ?? 'another sandbox'}: refused` : `sandbox ${sandboxKey(r.namespace, r.name)} declares id ${r.id}, the <namespace>--<name> id of another sandbox: refused`);
  });
  for (const d of drivers) view.registerDriver(d.id);
  let tick: NodeJS.Timeout | undefined;
  const lifecycleLog = log.child({ part: 'lifecycle' });
  const channel = lifecycleChannel(config, gatewayId, lifecycleLog);
  const driverById = (id: string): Driver | undefined => drivers.find((d) => d.id === id);
  const reporter = new ActivityReporter({
    view,
    channel,
    report: (id) => {
      const d = driverById(id);
      return d?.reportActivity === undefined ? undefined : (reports) => d.reportActivity!(reports);
    },
    reportIntervalMs: config.activityReportIntervalMs,
    patchIntervalMs: config.activityPatchIntervalMs,
    now,
    log: lifecycleLog,
  });
  const idle = new IdleController({
    view,
    channel,
    pause: (id) => {
      const d = driverById(id);
      return d?.pause === undefined ? undefined : (ns, name) => d.pause!(ns, name);
    },
    defaultTimeoutMs: idleTimeoutMs,
    graceMs: config.presence === 'memory' ? 0 : config.activityReportIntervalMs,
    checkMs: Math.min(1000, config.activityReportIntervalMs),
    now,
    log: lifecycleLog,
    counted: metrics.watchLifecycle(() => view.activity.idle(), now),
  });

  const components: Component[] = [
    // First to start and last to stop: every listener has closed before the access log's last flush.
    ...(accessLog === undefined
      ? []
      : [
          {
            name: 'access log',
            start: () => accessLog.ready().catch((err: unknown) => Promise.reject(startFailed('--access-log', 'the access log', err))),
            stop: () => accessLog.close(),
          },
        ]),
    // Likewise: spans of the last requests are exported before the process goes.
    ...(tracing === undefined ? [] : [{ name: 'tracing', start: () => undefined, stop: () => tracing.close() }]),
    // Watched from the start; the pairs were loaded (and checked) with the configuration.
    ...certificateStores.map((s): Component => ({ name: 'TLS certificates', start: () => s.start(), stop: () => s.close() })),
    // Listeners first, so they close last. The relay listener leads: its address goes into the lease.
    listener(
      '--relay-port',
      host,
      config.relayPort,
      async () => {
        relayAddress = resolveRelayAddress(config.relayAdvertiseAddress, host, await relay.start());
        if (relaySecret.generated && config.presence !== 'memory') log.warn('no relay secret configured (--relay-secret-file): peer gateways cannot forward relay traffic to this one');
      },
      (ms) => relay.close(ms),
    ),
    listener(
      '--grpc-port',
      host,
      config.grpcPort,
      async () => (grpc = await startGrpcServer(decider, { host, port: config.grpcPort, door, limits: grpcLimits(config), extProcMaxQueued: config.extProcMaxQueued, tls: doorsTls }, log.child({ part: 'envoy' }))),
      (ms) => grpc!.close(ms),
    ),
    listener(
      '--admin-port',
      host,
      config.adminPort,
      async () => (adminPort = await listenOn(admin, host, config.adminPort)),
      (ms) => closeGracefully(admin, ms, adminFront),
    ),
    ...(ops === undefined
      ? []
      : [listener('--ops-port', opsHost, config.opsPort, async () => (opsPort = await listenOn(ops, opsHost, config.opsPort)), (ms) => closeGracefully(ops, ms))]),
    ...(proxy === undefined ? [] : [listener('--proxy-port', host, config.proxyPort, () => proxy.start(), (ms) => proxy.close(ms))]),
    ...(proxy === undefined || proxyTls === undefined ? [] : [listener('--proxy-tls-port', host, proxyTls.port, () => proxy.startTls(), (ms) => proxy.closeTls(ms))]),
    ...(keyStore === undefined
      ? []
      : [
          {
            name: 'API key store',
            start: () => keyStore.start().catch((err: unknown) => Promise.reject(startFailed('--api-keys', 'the API key store', err))),
            stop: () => keyStore.close(),
          },
        ]),
    ...(linkKeys === undefined ? [] : [{ name: 'link keys', start: () => linkKeys.start(), stop: () => linkKeys.close() }]),
    {
      name: 'presence',
      async start() {
        const store = createPresenceStore(config, gatewayId, log.child({ part: 'presence' }), { relay: relayAddress });
        presence = store;
        view.setRelayResolver((id) => (id === gatewayId ? relayAddress : store.gatewayInfo?.(id)?.relay));
        store.onChange((ns, name, record) => view.setPresence(ns, name, presenceOf(record)));
        try {
          await store.start();
        } catch (err) {
          // Whatever it opened before failing goes with it.
          await store.close({ release: false }).catch(() => undefined);
          throw startFailed('--presence', 'the presence store', err);
        }
        for (const r of store.list()) view.setPresence(r.namespace, r.name, presenceOf(r));
      },
      async stop() {
        await presence!.close({ release: true }).catch((err: unknown) => sessionLog.warn({ err }, 'presence release failed'));
      },
    },
    {
      // Supervisors are told "service restart" and reconnect elsewhere. This gateway's records stay (and
      // its sandboxes Ready everywhere) until the new claims are seen or a bound passes; then the lease
      // and the records go in one step (presence stop), so failover never waits for the lease TTL.
      name: 'hand-over',
      start: () => undefined,
      async stop(deadline: Deadline) {
        if (presence?.kind !== 'redis') return;
        const held = [...presence.list()].filter((r) => r.gatewayId === gatewayId);
        await awaitTakeover(presence, gatewayId, held, Math.min(config.handoverTimeoutMs, config.shutdownTimeoutMs / 2, deadline.remainingMs()));
      },
    },
    ...(keys === undefined
      ? []
      : [
          listener(
            '--supervisor-port',
            host,
            config.supervisorPort,
            async () => {
              supervisors = new SupervisorServer(
                {
                  host,
                  port: config.supervisorPort,
                  keys,
                  heartbeatIntervalMs: config.heartbeatIntervalMs,
                  helloTimeoutMs: config.helloTimeoutMs,
                  maxFrameBytes: config.supervisorMaxFrameBytes,
                  maxSessions: config.maxSessions,
                  maxSessionsPerSource: config.maxSessionsPerSource,
                  handlerErrors: metrics.handlerErrors('supervisor'),
                  // Rotation at runtime: a key removed from the file closes the sessions it signed within one heartbeat interval.
                  keysFile: opts.supervisorKeys === undefined && config.supervisorSecretFile !== '' ? config.supervisorSecretFile : undefined,
                  relay: {
                    maxStreamsPerSandbox: config.relayMaxStreamsPerSandbox,
                    maxStreamsPerNamespace: namespaceShare(config.relayMaxStreamsPerNamespace, config.relayMaxStreams),
                    maxStreams: config.relayMaxStreams,
                    openTimeoutMs: config.relayOpenTimeoutMs,
                  },
                  tls: serverTls(supervisorCertificates),
                },
                presence!,
                sessionLog,
              );
              await supervisors.start();
              metrics.watchSessions(supervisors);
            },
            () => supervisors!.close(),
          ),
        ]),
    ...drivers.map(
      (d): Component => ({
        name: `driver ${d.id}`,
        start: () => d.start(sinkFor(d)).catch((err: unknown) => Promise.reject(startFailed(driverFlag(d.id), `driver ${d.id}`, err))),
        stop: () => d.stop().catch((err: unknown) => driverLog.warn({ err, driver: d.id }, 'driver stop failed')),
      }),
    ),
    {
      // Activity sharing and reports, and idle pause: off the request path, once the drivers run.
      name: 'lifecycle',
      async start() {
        await channel.start();
        reporter.start();
        idle.start();
      },
      async stop() {
        idle.stop();
        reporter.stop();
        await channel.close();
      },
    },
    {
      // Last to start, first to stop: serving is announced only once everything runs, and withdrawn
      // before anything goes (Envoy's health checks move traffic away first).
      name: 'serving',
      start() {
        if (view.synced) grpc!.setServing(true);
        tick = setInterval(() => view.tick(), 1000);
        tick.unref();
      },
      stop() {
        shuttingDown = true;
        grpc!.setServing(false);
        clearInterval(tick);
        view.waiters.close();
        watch.close();
      },
    },
  ];
  if (keys === undefined) sessionLog.warn('no supervisor secret configured (--supervisor-secret-file or SANDGATE_SUPERVISOR_SECRET): the supervisor endpoint is off');

  const onProblem = (p: StopProblem): void =>
    p.err === undefined ? log.warn({ component: p.component }, 'stop overran the shutdown deadline; abandoned') : log.warn({ err: p.err, component: p.component }, 'stop failed');
  await startAll(components, config.shutdownTimeoutMs, onProblem);
  log.info(
    { grpcPort: grpc!.port, adminPort, opsPort, supervisorPort: supervisors?.port, proxyPort: proxy?.port, proxyTlsPort: proxyTls === undefined ? undefined : proxy?.tlsPort, relayPort: relay.port, relayAddress, presence: presence!.kind, drivers: drivers.map((d) => d.id) },
    'sandgate started',
  );

  let closing: Promise<void> | undefined;
  const close = (): Promise<void> =>
    (closing ??= (async () => {
      await stopAll(components, deadlineIn(config.shutdownTimeoutMs), onProblem);
      log.info('sandgate stopped');
    })());

  return {
    config,
    gatewayId,
    view,
    log,
    metrics,
    tracing,
    drivers,
    presence: presence!,
    supervisors,
    grpcPort: grpc!.port,
    adminPort,
    opsPort,
    supervisorPort: supervisors?.port,
    proxyPort: proxy?.port,
    proxyTlsPort: proxyTls === undefined ? undefined : proxy?.tlsPort,
    relayPort: relay.port,
    relayAddress,
    lifecycle: { reporter, idle },
    close,
  };
}

/** A store's certificates as a listener's TLS (undefined: plain). */
function serverTls(store: CertificateStore | undefined, clientAuth = true): ServerTls | undefined {
  return store === undefined ? undefined : { options: store.serverOptions(clientAuth), attach: (s) => store.attach(s) };
}

/** The option that configures a driver, by its id (`file`, `kubernetes/…`, or a grpc:// driver's name). */
function driverFlag(id: string): string {
  if (id === 'file') return '--sandboxes';
  return id.startsWith('grpc/') ? '--drivers' : '--kubernetes';
}

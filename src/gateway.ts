import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
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
import { GrpcDriver, parseGrpcDriverUrl } from './drivers/grpc/grpc-driver.js';
import { createKubernetesDrivers } from './drivers/kubernetes/kubernetes-driver.js';
import { Decider } from './edge/decider.js';
import { startGrpcServer } from './edge/envoy/grpc-server.js';
import { AUTHZ_PREFIX, createHttpAuthz } from './edge/http-authz.js';
import { removedHeaders, type DoorOptions } from './edge/headers.js';
import { Resumer } from './edge/resume.js';
import { ApiKeyAuth, type ApiKeyStore } from './auth/api-keys.js';
import { FileApiKeyStore } from './auth/api-key-file-store.js';
import { RedisApiKeyStore } from './auth/api-key-redis-store.js';
import { createHmac } from 'node:crypto';
import type { KeyPolicy } from './domain/access.js';
import { EmbeddedProxy } from './edge/proxy/http-proxy.js';
import { resolveRelayAddress, resolveRelaySecret } from './edge/relay/relay-config.js';
import { RelayListener } from './edge/relay/relay-listener.js';
import { RelayError } from './sessions/relay-stream.js';
import { SandgateError } from './domain/errors.js';
import { closeGracefully, listenOn } from './lib/http-listen.js';
import { createLogger, type Logger } from './observability/logger.js';
import { GatewayMetrics } from './observability/metrics.js';
import { MemoryPresence } from './sessions/presence/memory-presence.js';
import type { PresenceRecord, PresenceStore } from './sessions/presence/presence-store.js';
import { redisTarget, type RedisConnectionOptions } from './lib/redis-connection.js';
import { createRedisPresence } from './sessions/presence/redis-presence.js';
import { SupervisorKeyFile } from './sessions/supervisor-key-file.js';
import { SupervisorServer } from './sessions/supervisor-server.js';
import { parseSupervisorKeys, type SupervisorKeys } from './sessions/supervisor-token.js';
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
  /** Supervisor token keys to use instead of the configured secret (the demo generates its own). */
  readonly supervisorKeys?: SupervisorKeys;
}

export interface Gateway {
  readonly config: Config;
  readonly gatewayId: string;
  readonly view: SandboxView;
  readonly log: Logger;
  readonly metrics: GatewayMetrics;
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
  readonly relayPort: number;
  /** `host:port` of the relay listener, as published in this gateway's lease. */
  readonly relayAddress: string;
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

export function driversFromConfig(c: Config, gatewayId: string, log?: Logger): Driver[] {
  const drivers: Driver[] = [];
  if (c.sandboxes !== '') drivers.push(new FileDriver(c.sandboxes));
  if (c.kubernetes) {
    drivers.push(
      ...createKubernetesDrivers({
        kubeconfig: c.kubeconfig === '' ? undefined : c.kubeconfig,
        kinds: c.kubeKinds as readonly ('agent-sandbox' | 'openkruise')[],
        namespaces: c.kubeNamespaces,
        defaultSessionModel: c.kubeSessionModel as 'required' | 'none',
        log,
      }),
    );
  }
  for (const url of c.drivers) {
    const { address, name } = parseGrpcDriverUrl(url);
    drivers.push(new GrpcDriver({ name, address, gatewayId }));
  }
  const ids = drivers.map((d) => d.id);
  const dup = ids.find((id, i) => ids.indexOf(id) !== i);
  if (dup !== undefined) throw new SandgateError('config_invalid', `two drivers are both named ${dup}: give each grpc:// driver its own ?name=`);
  return drivers;
}

/** Supervisor token keys from `--supervisor-secret-file` or `SANDGATE_SUPERVISOR_SECRET`; undefined when neither is set. */
export function supervisorKeysFromConfig(c: Config): SupervisorKeys | undefined {
  if (c.supervisorSecretFile !== '') {
    let text: string;
    try {
      text = readFileSync(c.supervisorSecretFile, 'utf8');
    } catch (err) {
      throw new SandgateError('config_invalid', `cannot read supervisor secret file ${c.supervisorSecretFile}: ${(err as Error).message}`, { cause: err });
    }
    return { keys: parseSupervisorKeys(text, c.supervisorSecretFile), audience: c.supervisorAudience };
  }
  if (c.supervisorSecret !== '') return { keys: parseSupervisorKeys(c.supervisorSecret, 'SANDGATE_SUPERVISOR_SECRET'), audience: c.supervisorAudience };
  return undefined;
}

/** A secret from its option or its file (the file wins); undefined when neither is set. */
export function secretFromConfig(value: string, file: string, what: string): Uint8Array | undefined {
  let text = value;
  if (file !== '') {
    try {
      text = readFileSync(file, 'utf8').trim();
    } catch (err) {
      throw new SandgateError('config_invalid', `cannot read the ${what} file ${file}: ${(err as Error).message}`, { cause: err });
    }
  }
  if (text === '') return undefined;
  const bytes = new TextEncoder().encode(text);
  if (bytes.length < 32) throw new SandgateError('config_invalid', `the ${what} must be at least 32 bytes`);
  return bytes;
}

export function apiKeyStoreFromConfig(c: Config, onError: (err: Error) => void): ApiKeyStore | undefined {
  if (c.apiKeys === '') return undefined;
  // The same connection options as presence (Sentinel, Cluster, TLS, credentials): one Redis deployment.
  if (/^rediss?:\/\//.test(c.apiKeys)) return new RedisApiKeyStore(redisTarget(c.apiKeys, c.presenceRedisOptions, 'apiKeys'), c.presenceKeyPrefix, 30_000, onError);
  return new FileApiKeyStore(c.apiKeys, onError);
}

function keyPolicy(namespaces: readonly string[]): KeyPolicy {
  return { all: namespaces.includes('*'), namespaces: new Set(namespaces.filter((n) => n !== '*')) };
}

function resumeVia(drivers: readonly Driver[], driverId: string, namespace: string, name: string): Promise<void> {
  const d = drivers.find((x) => x.id === driverId);
  if (d?.resume === undefined) return Promise.reject(new Error(`driver ${driverId} cannot resume sandboxes`));
  return d.resume(namespace, name);
}

/** Resolves once every sandbox in `held` shows a session on another gateway, or after `ms`. */
function awaitTakeover(presence: PresenceStore, gatewayId: string, held: readonly PresenceRecord[], ms: number): Promise<void> {
  const pending = new Set(held.map((r) => r.namespace + '/' + r.name));
  for (const r of held) if (presence.get(r.namespace, r.name)?.gatewayId !== gatewayId) pending.delete(r.namespace + '/' + r.name);
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

/** The Redis options of `--presence`, validated (undefined for `memory`). */
export function redisPresenceOptions(c: Config): { url: string; redisOptions: RedisConnectionOptions | undefined } | undefined {
  if (c.presence === 'memory') return undefined;
  const target = redisTarget(c.presence, c.presenceRedisOptions, 'presence (memory or a Redis URL)');
  return { url: target.url, redisOptions: target.options };
}

export function createPresenceStore(c: Config, gatewayId: string, log: Logger, gatewayInfo?: Readonly<Record<string, string>>): PresenceStore {
  const redis = redisPresenceOptions(c);
  if (redis === undefined) return new MemoryPresence(gatewayId, { log });
  return createRedisPresence({
    ...redis,
    gatewayId,
    leaseTtlMs: c.leaseTtlMs,
    rescanMs: c.presenceRescanMs,
    keyPrefix: c.presenceKeyPrefix,
    gatewayInfo,
    log,
  });
}

/**
 * The admin port's server (HTTP authz under /authz/ when `authz` is given, then `api`) or the ops port's
 * (`api` only). CONNECT gets a typed 405 rather than a closed socket.
 */
function adminServer(api: (req: IncomingMessage, res: ServerResponse) => Promise<void>, authz: ((req: IncomingMessage, res: ServerResponse) => void) | undefined, log: Logger): Server {
  const server = createServer((req, res) => {
    const url = req.url ?? '/';
    if (authz !== undefined && (url === AUTHZ_PREFIX || url.startsWith(AUTHZ_PREFIX + '/') || url.startsWith(AUTHZ_PREFIX + '?'))) return authz(req, res);
    api(req, res).catch((err: unknown) => {
      log.error({ err }, 'admin request failed');
      if (!res.headersSent) sendError(res, 'internal_error');
      else res.destroy();
    });
  });
  server.keepAliveTimeout = 65_000;
  return server;
}

export async function startGateway(opts: GatewayOptions): Promise<Gateway> {
  const config = opts.config;
  const gatewayId = config.gatewayId !== '' ? config.gatewayId : `${hostname()}-${process.pid}`;
  const log = createLogger(config.logLevel, opts.logDestination).child({ gatewayId });
  log.info({ config: redacted(config) }, 'configuration');
  const tokenSecret = secretFromConfig(config.trafficTokenSecret, config.trafficTokenSecretFile, 'traffic token secret');
  const view = new SandboxView({
    now: opts.now ?? Date.now,
    tombstoneTtlMs: config.tombstoneTtlMs,
    waiters: { perSandbox: config.waitersPerSandbox, total: config.waitersTotal },
    deriveToken: tokenSecret === undefined ? undefined : (id) => createHmac('sha256', tokenSecret).update(id).digest('hex'),
  });
  const metrics = new GatewayMetrics(view);
  const drivers = opts.drivers ?? driversFromConfig(config, gatewayId, log.child({ part: 'drivers' }));
  const authLog = log.child({ part: 'auth' });
  const keyStore = apiKeyStoreFromConfig(config, (err) => authLog.warn({ err }, 'API key store problem'));
  const pepper = keyStore === undefined ? undefined : secretFromConfig(config.keyPepper, config.keyPepperFile, 'key pepper');
  if (keyStore !== undefined && pepper === undefined) throw new SandgateError('config_invalid', 'an API key store needs a pepper: set --key-pepper-file or SANDGATE_KEY_PEPPER');
  const apiKeys = keyStore === undefined ? undefined : new ApiKeyAuth(keyStore, pepper!, config.adminTeam);
  const policy = keyPolicy(config.apiKeyNamespaces);
  const resumer = new Resumer(view, (driverId, ns, name) => resumeVia(drivers, driverId, ns, name), config.autoResume, log.child({ part: 'resume' }));
  const decider = new Decider(
    view,
    routeOptions(config),
    config.readinessWaitMs,
    metrics,
    log.child({ part: 'edge' }),
    {
      keys: apiKeys,
      apiKeyHeader: config.apiKeyHeader,
      policy,
      tokenHeaders: config.trafficTokenHeaders,
    },
    resumer,
  );
  const keys = opts.supervisorKeys ?? supervisorKeysFromConfig(config);
  // Checked before any listener opens: a refused configuration must leave nothing running.
  redisPresenceOptions(config);
  // The relay listener starts first: its address goes into this gateway's lease.
  const relaySecret = resolveRelaySecret(config.relaySecret, config.relaySecretFile);
  const late: { supervisors?: SupervisorServer } = {};
  const relay = new RelayListener(
    {
      openRelayStream: (ns, name, port, signal) =>
        late.supervisors?.openRelayStream(ns, name, port, signal) ?? Promise.reject(new RelayError('no_session', 'the supervisor endpoint is off on this gateway')),
    },
    { host: config.listenHost, port: config.relayPort, secret: relaySecret.secret, headersTimeoutMs: config.proxyHeadersTimeoutMs, idleTimeoutMs: config.proxyIdleTimeoutMs },
    log.child({ part: 'relay' }),
  );
  const relayAddress = resolveRelayAddress(config.relayAdvertiseAddress, config.listenHost, await relay.start());
  if (relaySecret.generated && config.presence !== 'memory') log.warn('no relay secret configured (--relay-secret-file): peer gateways cannot forward relay traffic to this one');
  const presence = createPresenceStore(config, gatewayId, log.child({ part: 'presence' }), { relay: relayAddress });
  view.setRelayResolver((id) => (id === gatewayId ? relayAddress : presence.gatewayInfo?.(id)?.relay));
  let shuttingDown = false;
  const door: DoorOptions = { upstreamHeader: config.upstreamHeader, removeHeaders: removedHeaders(config.stripCredentials), relaySecret: relaySecret.secret };
  const grpc = await startGrpcServer(decider, { host: config.listenHost, port: config.grpcPort, door }, log.child({ part: 'envoy' }));

  const readiness: Readiness = {
    notReady() {
      const reasons = view.unsyncedDrivers().map((d) => `driver ${d} has not synced`);
      if (shuttingDown) reasons.push('shutting down');
      return reasons;
    },
    degraded: () => [...presence.degraded(), ...(keyStore?.degraded() ?? [])],
  };

  metrics.watchReadiness({ notReady: () => readiness.notReady(), presenceDegraded: () => presence.degraded(), keysDegraded: () => keyStore?.degraded() ?? [] });

  const driverLog = log.child({ part: 'drivers' });
  view.onIdRefused((r) => {
    metrics.refusedIds.labels(r.driver, r.reason).inc();
    driverLog.warn(r, r.reason === 'in_use' ? `sandbox ${r.namespace}/${r.name} declares id ${r.id}, held by ${r.holder ?? 'another sandbox'}: refused` : `sandbox ${r.namespace}/${r.name} declares id ${r.id}, the <namespace>--<name> id of another sandbox: refused`);
  });
  for (const d of drivers) view.registerDriver(d.id);
  const sinkFor = (d: Driver): DriverSink => {
    // Bound once: a busy driver's events must not format label sets one by one.
    const applied = metrics.driverEvents.labels(d.id, 'applied');
    const stale = metrics.driverEvents.labels(d.id, 'stale');
    return {
      replace(snapshots) {
        view.replace(d.id, snapshots);
        metrics.driverEvents.labels(d.id, 'resync').inc();
        driverLog.info({ driver: d.id, sandboxes: snapshots.length }, 'driver list applied');
        if (view.synced && !shuttingDown) grpc.setServing(true);
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

  const watch = new SandboxWatch(view);
  const apiDeps = {
    view,
    registry: metrics.registry,
    readiness,
    watch,
    gatewayId,
    log: log.child({ part: 'api' }),
    auth: apiKeys === undefined ? undefined : { principal: (key: string | undefined) => apiKeys.principal(key), header: config.apiKeyHeader.toLowerCase(), policy },
  };
  const separateOps = config.opsPort >= 0;
  const httpAuthz = createHttpAuthz(decider, door, log.child({ part: 'edge' }));
  const admin = adminServer(createAdminApi(apiDeps, separateOps ? 'health' : 'all'), httpAuthz, log);
  const ops = separateOps ? adminServer(createAdminApi(apiDeps, 'operator'), undefined, log) : undefined;

  let adminPort: number;
  let opsPort: number | undefined;
  try {
    adminPort = await listenOn(admin, config.listenHost, config.adminPort);
    if (ops !== undefined) opsPort = await listenOn(ops, config.opsListenHost !== '' ? config.opsListenHost : config.listenHost, config.opsPort);
  } catch (err) {
    await Promise.all([grpc.close(0), relay.close(0), closeGracefully(admin, 0)]);
    throw err;
  }
  await keyStore?.start();
  presence.onChange((ns, name, record) => view.setPresence(ns, name, presenceOf(record)));
  await presence.start();
  for (const r of presence.list()) view.setPresence(r.namespace, r.name, presenceOf(r));
  const sessionLog = log.child({ part: 'sessions' });
  let supervisors: SupervisorServer | undefined;
  let keyFile: SupervisorKeyFile | undefined;
  if (keys !== undefined) {
    supervisors = new SupervisorServer(
      {
        host: config.listenHost,
        port: config.supervisorPort,
        keys,
        heartbeatIntervalMs: config.heartbeatIntervalMs,
        helloTimeoutMs: config.helloTimeoutMs,
        maxFrameBytes: config.supervisorMaxFrameBytes,
        maxSessions: config.maxSessions,
        maxSessionsPerSource: config.maxSessionsPerSource,
        relay: { maxStreamsPerSandbox: config.relayMaxStreamsPerSandbox, maxStreams: config.relayMaxStreams, openTimeoutMs: config.relayOpenTimeoutMs },
      },
      presence,
      sessionLog,
    );
    late.supervisors = supervisors;
    await supervisors.start();
    metrics.watchSessions(supervisors);
    if (opts.supervisorKeys === undefined && config.supervisorSecretFile !== '') {
      // Rotation at runtime: a key removed from the file closes the sessions it signed within one heartbeat interval.
      const server = supervisors;
      keyFile = new SupervisorKeyFile({
        path: config.supervisorSecretFile,
        audience: config.supervisorAudience,
        initial: keys,
        onChange: (next) => {
          sessionLog.info({ kids: next.keys.map((k) => k.kid) }, 'supervisor keys reloaded');
          server.setKeys(next);
        },
        onError: (err) => sessionLog.warn({ err }, err.message),
      });
      keyFile.start(config.heartbeatIntervalMs);
    }
  } else {
    sessionLog.warn('no supervisor secret configured (--supervisor-secret-file or SANDGATE_SUPERVISOR_SECRET): the supervisor endpoint is off');
  }
  let proxy: EmbeddedProxy | undefined;
  if (config.proxy) {
    proxy = new EmbeddedProxy(
      decider,
      {
        host: config.listenHost,
        port: config.proxyPort,
        upstreamHeader: config.upstreamHeader,
        stripHeaders: [...config.stripHeaders, ...config.stripCredentials],
        stripOriginOnUpgrade: config.stripOriginOnUpgrade,
        connectTimeoutMs: config.proxyConnectTimeoutMs,
        headersTimeoutMs: config.proxyHeadersTimeoutMs,
        idleTimeoutMs: config.proxyIdleTimeoutMs,
        relay: { gatewayId, secret: relaySecret.secret, streams: supervisors },
        maxConnectionsPerSandbox: config.maxConnectionsPerSandbox,
      },
      log.child({ part: 'proxy' }),
    );
    await proxy.start();
  }
  for (const d of drivers) await d.start(sinkFor(d));
  if (view.synced) grpc.setServing(true);
  const tick = setInterval(() => view.tick(), 1000);
  tick.unref();
  log.info({ grpcPort: grpc.port, adminPort, opsPort, supervisorPort: supervisors?.port, proxyPort: proxy?.port, relayPort: relay.port, relayAddress, presence: presence.kind, drivers: drivers.map((d) => d.id) }, 'sandgate started');

  let closing: Promise<void> | undefined;
  const close = (): Promise<void> =>
    (closing ??= (async () => {
      shuttingDown = true;
      grpc.setServing(false);
      clearInterval(tick);
      keyFile?.stop();
      view.waiters.close();
      watch.close();
      // Supervisors are told "service restart" and reconnect elsewhere. This gateway's records stay (and
      // its sandboxes Ready everywhere) until the new claims are seen or a bound passes; then the lease
      // and the records go in one step, so failover never waits for the lease TTL.
      const held = [...presence.list()].filter((r) => r.gatewayId === gatewayId);
      await supervisors?.close();
      if (presence.kind === 'redis') await awaitTakeover(presence, gatewayId, held, Math.min(config.handoverTimeoutMs, config.shutdownTimeoutMs / 2));
      await presence.close({ release: true }).catch((err: unknown) => sessionLog.warn({ err }, 'presence release failed'));
      await keyStore?.close();
      await Promise.all(drivers.map((d) => d.stop().catch((err: unknown) => driverLog.warn({ err, driver: d.id }, 'driver stop failed'))));
      const grace = config.shutdownTimeoutMs;
      await Promise.all([grpc.close(grace), closeGracefully(admin, grace), ops === undefined ? undefined : closeGracefully(ops, grace), proxy?.close(grace), relay.close(grace)]);
      log.info('sandgate stopped');
    })());

  return { config, gatewayId, view, log, metrics, drivers, presence, supervisors, grpcPort: grpc.port, adminPort, opsPort, supervisorPort: supervisors?.port, proxyPort: proxy?.port, relayPort: relay.port, relayAddress, close };
}

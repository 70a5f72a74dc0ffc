import { grpcLimits, h2cLimits } from '../config/factories.js';
import type { Config } from '../config/schema.js';
import { listenFailed } from '../config/start-errors.js';
import { strippedCredentials } from '../edge/headers.js';
import { startGrpcServer, type GrpcFrontDoor } from '../edge/envoy/grpc-server.js';
import { EmbeddedProxy } from '../edge/proxy/http-proxy.js';
import { resolveRelayAddress } from '../edge/relay/relay-config.js';
import { RelayListener } from '../edge/relay/relay-listener.js';
import type { Lifecycle } from '../lib/lifecycle.js';
import type { Logger } from '../observability/logger.js';
import type { RelayOpener } from '../sessions/relay-opener.js';
import type { Core } from './core.js';

/**
 * The traffic doors: the relay listener (streams over supervisor sessions, for peers and the proxy),
 * the Envoy gRPC door (ext_authz, ext_proc, health) and the embedded proxy. Each starts listening and
 * hands back what it bound.
 */

/**
 * Starts a listener: its bind failure becomes one `listen_failed` sentence naming `portFlag`; at shutdown
 * `close` gets what is left of the deadline as its grace period.
 */
export function startListener<T>(
  life: Lifecycle,
  portFlag: string,
  at: { host: string; port: number },
  start: () => Promise<T>,
  close: (started: T, graceMs: number) => Promise<void>,
): Promise<T> {
  return life.start(
    portFlag,
    async () => {
      try {
        return await start();
      } catch (err) {
        throw listenFailed(portFlag, at.host, at.port, err);
      }
    },
    (started, deadline) => close(started, deadline.remainingMs()),
  );
}

export interface RelayDoor {
  readonly port: number;
  /** `host:port` of the relay listener, as published in this gateway's lease. */
  readonly address: string;
}

type RelaySlice = Pick<
  Config,
  'listenHost' | 'relayPort' | 'relayAdvertiseAddress' | 'proxyHeadersTimeoutMs' | 'proxyIdleTimeoutMs' | 'presence' | 'h2cMaxSessionsPerUpstream' | 'h2cMaxStreamsPerSession' | 'h2cIdleTimeoutMs'
>;

/** The relay listener leads the start: its address goes into the presence lease. */
export async function startRelayDoor(life: Lifecycle, config: RelaySlice, core: Core, streams: RelayOpener, log: Logger): Promise<RelayDoor> {
  const host = config.listenHost;
  const relay = new RelayListener(
    streams,
    { host, port: config.relayPort, credentials: core.relayCredentials, headersTimeoutMs: config.proxyHeadersTimeoutMs, idleTimeoutMs: config.proxyIdleTimeoutMs, handlerErrors: core.metrics.handlerErrors('relay'), recorder: core.recorder, tls: core.certificates.doors, h2c: h2cLimits(config), guard: core.listeners.for('relay') },
    log.child({ part: 'relay' }),
  );
  core.metrics.watchH2c(relay.h2c);
  const port = await startListener(life, '--relay-port', { host, port: config.relayPort }, () => relay.start(), (_, ms) => relay.close(ms));
  if (core.relaySecretGenerated && config.presence !== 'memory') log.warn('no relay secret configured (--relay-secret-file): peer gateways cannot forward relay traffic to this one');
  return { port, address: resolveRelayAddress(config.relayAdvertiseAddress, host, port) };
}

/** The Envoy door (ext_authz, ext_proc and gRPC health on `--grpc-port`); NOT_SERVING until the drivers sync. */
export function startEnvoyDoor(life: Lifecycle, config: Config, core: Core, log: Logger): Promise<GrpcFrontDoor> {
  const at = { host: config.listenHost, port: config.grpcPort };
  return startListener(life, '--grpc-port', at, () => startGrpcServer(core.decider, { ...at, door: core.door, limits: grpcLimits(config), extProcMaxQueued: config.extProcMaxQueued, tls: core.certificates.doors, guard: core.listeners.for('grpc') }, log.child({ part: 'envoy' })), (grpc, ms) => grpc.close(ms));
}

type ProxySlice = Pick<
  Config,
  | 'proxy'
  | 'listenHost'
  | 'proxyPort'
  | 'upstreamHeader'
  | 'stripHeaders'
  | 'stripCredentials'
  | 'stripOriginOnUpgrade'
  | 'proxyConnectTimeoutMs'
  | 'proxyHeadersTimeoutMs'
  | 'proxyIdleTimeoutMs'
  | 'maxConnectionsPerSandbox'
  | 'proxyRedirectHttpsPort'
  | 'upstreamConnectRetryMs'
  | 'h2cMaxSessionsPerUpstream'
  | 'h2cMaxStreamsPerSession'
  | 'h2cIdleTimeoutMs'
  | 'tunnelsPerNamespace'
  | 'tunnelIdleTimeout'
>;

export interface ProxyDoor {
  readonly port: number;
  /** Undefined without `--proxy-tls-port`. */
  readonly tlsPort: number | undefined;
}

/** The embedded proxy on `--proxy-port` (and `--proxy-tls-port`); undefined when it is off (`--no-proxy`). */
export async function startProxyDoor(life: Lifecycle, config: ProxySlice, core: Core, gatewayId: string, streams: RelayOpener, log: Logger): Promise<ProxyDoor | undefined> {
  if (!config.proxy) return undefined;
  const host = config.listenHost;
  const proxy = new EmbeddedProxy(
    core.decider,
    {
      host,
      port: config.proxyPort,
      upstreamHeader: config.upstreamHeader,
      stripHeaders: [...config.stripHeaders, ...strippedCredentials(config.stripCredentials, core.decider.jwt !== undefined)],
      stripOriginOnUpgrade: config.stripOriginOnUpgrade,
      connectTimeoutMs: config.proxyConnectTimeoutMs,
      headersTimeoutMs: config.proxyHeadersTimeoutMs,
      idleTimeoutMs: config.proxyIdleTimeoutMs,
      relay: { gatewayId, credentials: core.relayCredentials, streams: core.supervisorKeys === undefined ? undefined : streams, peerTls: core.certificates.relayPeer },
      maxConnectionsPerSandbox: config.maxConnectionsPerSandbox,
      handlerErrors: core.metrics.handlerErrors('proxy'),
      activity: core.activity,
      connectRetry: { ms: config.upstreamConnectRetryMs, now: core.now },
      tls: core.certificates.proxyTls,
      redirectHttpsPort: config.proxyRedirectHttpsPort,
      h2c: h2cLimits(config),
      tunnels: { perNamespace: config.tunnelsPerNamespace, idleTimeoutMs: config.tunnelIdleTimeout },
      guards: core.listeners,
    },
    log.child({ part: 'proxy' }),
  );
  core.metrics.watchH2c(proxy.h2c);
  await startListener(life, '--proxy-port', { host, port: config.proxyPort }, () => proxy.start(), (_, ms) => proxy.close(ms));
  const tlsPort = core.certificates.proxyTls === undefined ? undefined : await startListener(life, '--proxy-tls-port', { host, port: core.certificates.proxyTls.port }, () => proxy.startTls(), (_, ms) => proxy.closeTls(ms));
  return { port: proxy.port, tlsPort };
}

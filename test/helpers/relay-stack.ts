import { request } from 'node:http';
import { Readable } from 'node:stream';
import { pino } from 'pino';
import WebSocket from 'ws';
import type { RouteOptions } from '../../src/domain/route-key.js';
import type { BackendSnapshot } from '../../src/domain/sandbox.js';
import { Decider } from '../../src/edge/decider.js';
import type { H2cLimits } from '../../src/edge/forwarding/h2c-pool.js';
import { EmbeddedProxy, type ProxyOptions } from '../../src/edge/proxy/http-proxy.js';
import { RelayCredentials } from '../../src/edge/relay/relay-credential.js';
import { RelayListener } from '../../src/edge/relay/relay-listener.js';
import type { ServerTls } from '../../src/lib/http-listen.js';
import type { PeerTls } from '../../src/lib/tls/peer-tls.js';
import type { ExchangeRecorder } from '../../src/observability/exchange.js';
import { GatewayMetrics } from '../../src/observability/metrics.js';
import { MemoryPresence } from '../../src/sessions/presence/memory-presence.js';
import type { PresenceRecord, PresenceStore } from '../../src/sessions/presence/presence-store.js';
import { createRedisPresence } from '../../src/sessions/presence/redis-presence.js';
import type { RelayLimits } from '../../src/sessions/relay-opener.js';
import { SupervisorClient, type RelayClientOptions } from '../../src/sessions/supervisor-client.js';
import { SupervisorServer } from '../../src/sessions/supervisor-server.js';
import { SUBPROTOCOL } from '../../src/sessions/supervisor-protocol.js';
import { mintSupervisorToken, type SupervisorKeys } from '../../src/sessions/supervisor-token.js';
import { SandboxView } from '../../src/view/sandbox-view.js';
import { eventually } from './eventually.js';
import { startRedisServer, type RedisServer } from './redis-server.js';
import type { ProxyResponse } from './upstream.js';

/**
 * One gateway's relay pieces, built in-process: view (fed by a list of snapshots and by presence),
 * decider, supervisor endpoint, relay listener and embedded proxy — what src/gateway.ts wires, minus
 * the parts the relay does not touch.
 */

export const RELAY_SECRET = 'relay-test-secret-0123456789abcdef-0123456789';
/** What Envoy presents to a relay listener: credentials minted under the shared secret, bound to one target. */
export const RELAY_CREDENTIALS = new RelayCredentials(RELAY_SECRET, 10_000);
export const KEYS: SupervisorKeys = { keys: [{ kid: 'k', secret: new TextEncoder().encode('s'.repeat(32)) }], audience: 'sandgate-supervisor' };
export const ROUTE: RouteOptions = { order: ['headers', 'e2b-headers', 'host', 'path'], baseDomain: 'localhost', defaultNamespace: 'default', defaultPort: 49983, pathPrefix: '' };

/** A ready, supervisor-required, relay-only sandbox. */
export function relaySandbox(name: string): BackendSnapshot {
  return {
    namespace: 'team-a',
    name,
    uid: 'uid-' + name,
    resourceVersion: '1',
    instanceId: 'inst-1',
    ids: [],
    state: 'ready',
    conditions: [{ type: 'Ready', status: 'True', reason: 'DependenciesReady', message: '' }],
    endpoint: { kind: 'relay' },
    sessionModel: 'required',
  };
}

export interface StackOptions {
  readonly gatewayId: string;
  readonly sandboxes: readonly BackendSnapshot[];
  /** `memory` (default) or a redis:// URL shared with the other stacks. */
  readonly presence?: string;
  readonly keyPrefix?: string;
  readonly limits?: Partial<RelayLimits>;
  readonly windowBytes?: number;
  readonly proxy?: Partial<ProxyOptions>;
  readonly readinessWaitMs?: number;
  /** The supervisor endpoint's frame limit (default 1 MiB). */
  readonly maxFrameBytes?: number;
  /** Exchange records (access log, tracing) for the decider and the relay listener. */
  readonly recorder?: ExchangeRecorder;
  /** The relay over TLS: the listener's server side, and how the proxy connects to peers' listeners. */
  readonly tls?: { readonly listener: ServerTls; readonly peer: PeerTls };
  /** The relay listener's bounds on HTTP/2 sessions to h2c ports. */
  readonly h2c?: Partial<H2cLimits>;
}

export interface RelayStack {
  readonly gatewayId: string;
  readonly view: SandboxView;
  readonly decider: Decider;
  readonly presence: PresenceStore;
  readonly supervisors: SupervisorServer;
  readonly listener: RelayListener;
  readonly proxy: EmbeddedProxy;
  /** `127.0.0.1:<relay listener port>`. */
  readonly relayAddress: string;
  readonly supervisorUrl: string;
  close(): Promise<void>;
}

function presenceOf(r: PresenceRecord | undefined) {
  return r === undefined ? undefined : { gatewayId: r.gatewayId, sessionId: r.sessionId, instanceId: r.instanceId, epoch: r.epoch, since: r.since };
}

export async function startRelayStack(o: StackOptions): Promise<RelayStack> {
  const log = pino({ level: 'silent' });
  const view = new SandboxView({ waiters: { perSandbox: 100, total: 1000 } });
  const decider = new Decider({ view, route: ROUTE, readinessWaitMs: o.readinessWaitMs ?? 2000, metrics: new GatewayMetrics(view, false), log, recorder: o.recorder });
  const started: { supervisors?: SupervisorServer } = {};
  // The listener starts first so its address can go into the gateway lease; it reaches the sessions once they have started.
  const listener = new RelayListener(
    { openRelayStream: (ns, name, port, signal) => started.supervisors!.openRelayStream(ns, name, port, signal) },
    { host: '127.0.0.1', port: 0, credentials: RELAY_CREDENTIALS, headersTimeoutMs: o.proxy?.headersTimeoutMs ?? 5000, idleTimeoutMs: o.proxy?.idleTimeoutMs ?? 30_000, recorder: o.recorder, tls: o.tls?.listener, h2c: o.h2c },
    log,
  );
  const relayAddress = `127.0.0.1:${await listener.start()}`;
  const url = o.presence ?? 'memory';
  const presence: PresenceStore =
    url === 'memory'
      ? new MemoryPresence(o.gatewayId)
      : createRedisPresence({ url, gatewayId: o.gatewayId, leaseTtlMs: 1000, rescanMs: 500, keyPrefix: o.keyPrefix, gatewayInfo: { relay: relayAddress }, log });
  const info = (id: string): string | undefined => (presence as { gatewayInfo?: (id: string) => Readonly<Record<string, string>> | undefined }).gatewayInfo?.(id)?.relay;
  view.setRelayResolver((id) => (id === o.gatewayId ? relayAddress : info(id)));
  view.registerDriver('test');
  view.replace('test', [...o.sandboxes]);
  presence.onChange((ns, name, r) => view.setPresence(ns, name, presenceOf(r)));
  await presence.start();
  for (const r of presence.list()) view.setPresence(r.namespace, r.name, presenceOf(r));
  const supervisors = new SupervisorServer(
    { host: '127.0.0.1', port: 0, keys: KEYS, heartbeatIntervalMs: 5000, helloTimeoutMs: 5000, maxFrameBytes: o.maxFrameBytes ?? 1024 * 1024, maxSessions: 100, maxSessionsPerSource: 100, relay: o.limits, relayWindowBytes: o.windowBytes },
    presence,
    log,
  );
  started.supervisors = supervisors;
  const supervisorPort = await supervisors.start();
  const proxy = new EmbeddedProxy(
    decider,
    {
      host: '127.0.0.1',
      port: 0,
      upstreamHeader: 'x-sandgate-upstream',
      stripHeaders: [],
      stripOriginOnUpgrade: false,
      connectTimeoutMs: 2000,
      headersTimeoutMs: 5000,
      idleTimeoutMs: 30_000,
      relay: { gatewayId: o.gatewayId, credentials: RELAY_CREDENTIALS, streams: supervisors, peerTls: o.tls?.peer },
      ...o.proxy,
    },
    log,
  );
  await proxy.start();
  return {
    gatewayId: o.gatewayId,
    view,
    decider,
    presence,
    supervisors,
    listener,
    proxy,
    relayAddress,
    supervisorUrl: `ws://127.0.0.1:${supervisorPort}`,
    async close() {
      view.waiters.close();
      await supervisors.close();
      await presence.close({ release: true });
      await Promise.all([listener.close(200), proxy.close(200)]);
    },
  };
}

/** Gateways A and B sharing presence through their own redis-server, the sandbox's supervisor connected to B. */
export interface GatewayPair {
  readonly redis: RedisServer;
  readonly a: RelayStack;
  readonly b: RelayStack;
  readonly sup: SupervisorClient;
  /** Stops the supervisor, both gateways and the redis-server. */
  close(): Promise<void>;
}

/**
 * Starts a GatewayPair serving `sandbox` (a relay sandbox) and resolves once A sees B hold its session and
 * knows B's relay address. `own` adds one stack's own options (its relay TLS, say) by gateway id. What
 * started is closed again when a later step fails.
 */
export async function startGatewayPair(sandbox: BackendSnapshot, keyPrefix: string, own: (gatewayId: string) => Partial<StackOptions> = () => ({})): Promise<GatewayPair> {
  const redis = await startRedisServer();
  const started: { a?: RelayStack; b?: RelayStack; sup?: SupervisorClient } = {};
  const close = async (): Promise<void> => {
    started.sup?.stop();
    await Promise.all([started.a?.close(), started.b?.close()]);
    await redis.stop();
  };
  try {
    const common = { sandboxes: [sandbox], presence: redis.url, keyPrefix };
    const a = (started.a = await startRelayStack({ gatewayId: 'gw-a', ...common, ...own('gw-a') }));
    const b = (started.b = await startRelayStack({ gatewayId: 'gw-b', ...common, ...own('gw-b') }));
    const sup = (started.sup = await startSupervisor(b.supervisorUrl, sandbox.name, undefined, undefined, sandbox.namespace));
    await eventually(() => a.view.get(sandbox.namespace, sandbox.name)?.relayOwner === 'gw-b' && a.view.relayAddress('gw-b') === b.relayAddress, 5000, "A to see B's session and B's relay address");
    return { redis, a, b, sup, close };
  } catch (err) {
    await close();
    throw err;
  }
}

/** A reference supervisor for `namespace`/`name` (team-a unless given), connected to `gateway`; resolves once accepted. */
export async function startSupervisor(gateway: string, name: string, relay?: RelayClientOptions | false, windowBytes?: number, namespace = 'team-a'): Promise<SupervisorClient> {
  const token = await mintSupervisorToken(KEYS, namespace, name, 3600);
  const relayOpts = relay === false ? false : { ...relay, ...(windowBytes === undefined ? {} : { windowBytes }) };
  const c = new SupervisorClient({ gateway, token, namespace, name, instanceId: 'inst-1', backoff: { initialMs: 20, maxMs: 200 }, relay: relayOpts });
  await new Promise((resolve) => c.once('accepted', resolve).start());
  return c;
}

/** A reference supervisor for team-a/`name` on a test gateway, resolved once the gateway's view has the sandbox Ready. */
export async function supervisedReady(gw: { readonly supervisorPort?: number | undefined; readonly view: SandboxView }, name: string): Promise<SupervisorClient> {
  const sup = await startSupervisor(`ws://127.0.0.1:${gw.supervisorPort!}`, name);
  await eventually(() => gw.view.get('team-a', name)?.status.phase === 'Ready', 5000, `${name} Ready`);
  return sup;
}

/** A supervisor that completes the handshake and then ignores every relay frame (OPEN is never answered). */
export async function silentSupervisor(gateway: string, name: string): Promise<WebSocket> {
  const token = await mintSupervisorToken(KEYS, 'team-a', name, 3600);
  const ws = new WebSocket(gateway + '/v1/supervisor', SUBPROTOCOL, { headers: { authorization: `Bearer ${token}` } });
  await new Promise((resolve, reject) => {
    ws.once('open', () => ws.send(JSON.stringify({ type: 'hello', namespace: 'team-a', name, instanceId: 'silent', version: 'test' })));
    ws.on('message', (m, isBinary) => {
      if (!isBinary && JSON.parse(m.toString()).type === 'accepted') resolve(undefined);
    });
    ws.once('error', reject);
  });
  return ws;
}

/** A request straight to a relay listener, as Envoy sends it after a relay decision. */
export function viaRelay(address: string, opts: { headers: Record<string, string>; path?: string; method?: string; body?: Readable | Buffer }): Promise<ProxyResponse> {
  const [host, port] = address.split(':');
  return new Promise((resolve, reject) => {
    const req = request({ host, port: Number(port), path: opts.path ?? '/', method: opts.method ?? 'GET', headers: opts.headers }, (res) => resolve({ status: res.statusCode ?? 0, headers: res.headers, res }));
    req.on('error', reject);
    if (opts.body instanceof Readable) opts.body.pipe(req);
    else req.end(opts.body);
  });
}

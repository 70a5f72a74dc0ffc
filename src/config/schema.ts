import { MAX_DURATION_MS } from '../domain/duration.js';
import { ROUTE_SOURCES } from '../domain/route-key.js';
import { DEFAULT_H2C_LIMITS as H2C } from '../edge/forwarding/h2c-pool.js';
import { GRPC_SERVER_LIMITS as GRPC } from '../lib/grpc-h2-connection.js';
import { CONNECTION_LIMITS as LISTEN } from '../lib/connection-guard.js';
import { TRACING_OPTIONS } from './tracing-options.js';

/**
 * The one configuration schema. Every option has a type, a default, a flag (`--kebab-case`), an
 * environment variable (`SANDGATE_UPPER_SNAKE`) and a description; docs/configuration.md is generated
 * from this table (`sandgate config --markdown`) and a test keeps it in step.
 */

type Kind = 'string' | 'int' | 'bool' | 'list' | 'enum' | 'duration';

interface BaseSpec<K extends Kind, T> {
  readonly kind: K;
  readonly default: T;
  readonly description: string;
  /** Redacted when the resolved configuration is logged. */
  readonly secret?: boolean;
  /** A standard variable read instead of `SANDGATE_*` (the OpenTelemetry SDK's `OTEL_*`). */
  readonly env?: string;
}

export type OptionSpec =
  | BaseSpec<'string', string>
  | (BaseSpec<'int', number> & { readonly min: number; readonly max: number })
  | BaseSpec<'bool', boolean>
  | (BaseSpec<'list', readonly string[]> & { readonly values?: readonly string[] })
  | (BaseSpec<'enum', string> & { readonly values: readonly string[] })
  | DurationSpec;

/**
 * A duration (src/domain/duration.ts: `500ms`, `30s`, `1h30m`, `7d`), held in milliseconds; `min` and `max`
 * in milliseconds too. `unit`: what a bare number counts — `ms` for the options named `…Ms`, else `s`.
 */
export type DurationSpec = BaseSpec<'duration', number> & { readonly unit: 'ms' | 's'; readonly min: number; readonly max: number };

const port = (def: number, description: string) => ({ kind: 'int', default: def, min: 0, max: 65535, description }) as const;

// Options are one declarative table: entries of the same kind share a shape by design; nothing here is
// logic to factor out.
export const SCHEMA = {
  config: { kind: 'string', default: '', description: 'Optional configuration file (YAML or JSON) with any of these options.' },
  listenHost: { kind: 'string', default: '0.0.0.0', description: 'Address every listener binds.' },
  maxConnections: {
    kind: 'int',
    default: LISTEN.maxConnections,
    min: 1,
    max: 1_000_000,
    description: 'Every listener (proxy, proxy TLS, relay, supervisor, admin, ops, gRPC): connections it holds open at once, per process; past it a new connection is closed at accept, unread (`sandgate_listener_connections_refused_total`). Keep the process\'s open-file limit above the sum.',
  },
  tlsHandshakeTimeoutMs: {
    kind: 'duration', unit: 'ms',
    default: LISTEN.tlsHandshakeTimeoutMs,
    min: 1,
    max: 120_000,
    description: 'Every TLS listener: a connection whose TLS handshake has not finished this long after accept is closed, unanswered (as is one whose handshake fails).',
  },
  requestHeaderTimeoutMs: {
    kind: 'duration', unit: 'ms',
    default: LISTEN.requestHeaderTimeoutMs,
    min: 1,
    max: 600_000,
    description: 'Every listener: a connection that has not sent a complete first request head (HTTP/2: the preface and first HEADERS) this long after accept, TLS handshake included, is closed. After its first request a connection is governed by the keep-alive and idle timeouts.',
  },
  grpcPort: port(9001, 'Envoy ext_authz, ext_proc and gRPC health, on one port (0 = any free port).'),
  grpcMaxConcurrentStreams: {
    kind: 'int',
    default: GRPC.maxConcurrentStreams,
    min: 1,
    max: 1_000_000,
    description: 'gRPC port: streams one connection may have open (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS); more are refused with RST_STREAM REFUSED_STREAM.',
  },
  grpcMaxStreamBufferBytes: {
    kind: 'int',
    default: GRPC.maxStreamBufferBytes,
    min: 1024,
    max: 1_073_741_824,
    description: 'gRPC port: request bytes one call may hold (a message still arriving, held at its announced length; messages being inflated; ext_proc messages queued); past it the call ends RESOURCE_EXHAUSTED.',
  },
  grpcMaxConnectionBufferBytes: {
    kind: 'int',
    default: GRPC.maxConnectionBufferBytes,
    min: 1024,
    max: 4_294_967_296,
    description: 'gRPC port: the same, summed over one connection\'s calls.',
  },
  grpcHandshakeTimeoutMs: {
    kind: 'duration', unit: 'ms',
    default: GRPC.handshakeTimeoutMs,
    min: 1,
    max: 600_000,
    description: 'gRPC port: a connection that has not sent the HTTP/2 preface and its SETTINGS within this time is closed.',
  },
  grpcIdleTimeoutMs: {
    kind: 'duration', unit: 'ms',
    default: GRPC.idleTimeoutMs,
    min: 1,
    max: 86_400_000,
    description: 'gRPC port: a connection without an open stream for this long gets GOAWAY and is closed (Envoy reconnects when it needs one).',
  },
  grpcGoawayGraceMs: {
    kind: 'duration', unit: 'ms',
    default: GRPC.goawayGraceMs,
    min: 0,
    max: 600_000,
    description: 'gRPC port: a connection that sent or was sent GOAWAY is closed this long after, calls still open or not.',
  },
  extProcMaxQueued: {
    kind: 'int',
    default: 64,
    min: 1,
    max: 100_000,
    description: 'ext_proc: messages one stream may queue behind a readiness wait (their bytes count against `--grpc-max-stream-buffer-bytes`); past either the stream ends RESOURCE_EXHAUSTED.',
  },
  adminPort: port(9090, 'HTTP authz (/authz/…) and /healthz, /readyz; also the operator surface (sandbox API, watch, /metrics) unless `--ops-port` moves it (0 = any free port).'),
  opsPort: {
    kind: 'int',
    default: -1,
    min: -1,
    max: 65535,
    description: 'Operator surface (sandbox API, watch, /metrics, /healthz, /readyz) on its own listener, apart from the decision door on the admin port (0 = any free port; -1 = off: served on the admin port). Recommended in production: the door reachable by Envoy/nginx only, the ops port by operators only (docs/tenancy.md).',
  },
  opsListenHost: { kind: 'string', default: '', description: 'Address the ops port binds (default: `--listen-host`), e.g. 127.0.0.1 or an internal interface.' },
  console: { kind: 'bool', default: true, description: 'Serve the operator console at `/console` on the operator surface (the ops port when `--ops-port` is set, else the admin port), with the sandbox API\'s authorization (docs/console.md).' },
  proxyPort: {
    kind: 'int',
    default: 8080,
    min: -1,
    max: 65535,
    description: 'Embedded proxy: carries HTTP and WebSocket traffic to sandboxes itself, with the same decision as the Envoy doors (0 = any free port; -1 = no plain-HTTP listener, with `--proxy-tls-port`).',
  },
  proxyTlsPort: {
    kind: 'int',
    default: -1,
    min: -1,
    max: 65535,
    description: 'Embedded proxy over TLS: HTTP/1.1 and HTTP/2 (ALPN), WebSockets over both (RFC 8441 for HTTP/2), with the certificates of `--tls-cert-file`/`--tls-key-file` or `--tls-dir` (0 = any free port; -1 = off).',
  },
  proxyRedirectHttpsPort: {
    kind: 'int',
    default: -1,
    min: -1,
    max: 65535,
    description: 'The plain proxy port answers every request with a 308 redirect to `https://<host>:<port><path>` (443: no port in the URL; 0: `--proxy-tls-port` itself; -1 = off: the plain port proxies).',
  },
  tlsCertFile: { kind: 'string', default: '', description: 'PEM certificate chain (leaf first; wildcards welcome) every TLS listener serves, with `--tls-key-file`. Re-read when it changes; a file that does not load keeps the last good pair.' },
  tlsKeyFile: { kind: 'string', default: '', description: 'PEM private key of `--tls-cert-file`.' },
  tlsDir: {
    kind: 'string',
    default: '',
    description: 'Directory of certificate pairs chosen by SNI (the longest matching DNS SAN wins; no match or no SNI: the pair named `default`, else the first): `<name>.crt` + `<name>.key`, or sub-directories with `tls.crt` + `tls.key` (mounted Kubernetes TLS Secrets). Re-read when it changes. Instead of `--tls-cert-file`.',
  },
  proxy: { kind: 'bool', default: true, description: 'Run the embedded proxy (turn off when Envoy is the only data plane).' },
  proxyConnectTimeoutMs: { kind: 'duration', unit: 'ms', default: 5000, min: 1, max: 600_000, description: 'Embedded proxy: connecting to a sandbox (past it: 504 upstream_timeout).' },
  proxyHeadersTimeoutMs: { kind: 'duration', unit: 'ms', default: 300_000, min: 1, max: 3_600_000, description: 'Embedded proxy: waiting for a sandbox\'s response headers (past it: 504 upstream_timeout).' },
  proxyIdleTimeoutMs: { kind: 'duration', unit: 'ms', default: 300_000, min: 1, max: 86_400_000, description: 'Embedded proxy: silence on an open body or WebSocket before both sides are closed.' },
  h2cMaxSessionsPerUpstream: {
    kind: 'int',
    default: H2C.maxSessionsPerUpstream,
    min: 1,
    max: 10_000,
    description: 'Embedded proxy and relay listener: HTTP/2 connections to one h2c sandbox port (one address and port, or one port over a relay session); when each carries its maximum of streams, a request is refused at once with 429 too_many_connections (gRPC: RESOURCE_EXHAUSTED).',
  },
  h2cMaxStreamsPerSession: {
    kind: 'int',
    default: H2C.maxStreamsPerSession,
    min: 1,
    max: 1_000_000,
    description: "Embedded proxy and relay listener: streams (requests) on one HTTP/2 connection to an h2c sandbox port; the sandbox's own SETTINGS_MAX_CONCURRENT_STREAMS wins when lower.",
  },
  h2cIdleTimeoutMs: {
    kind: 'duration', unit: 'ms',
    default: H2C.idleMs,
    min: 1,
    max: 86_400_000,
    description: 'Embedded proxy and relay listener: an HTTP/2 connection to an h2c sandbox port without a stream for this long is closed (GOAWAY).',
  },
  stripHeaders: { kind: 'list', default: [], description: 'Request headers the embedded proxy never forwards to a sandbox, besides hop-by-hop, routing and upstream headers.' },
  stripOriginOnUpgrade: { kind: 'bool', default: false, description: 'Embedded proxy: drop `Origin` on WebSocket upgrades (browser IDEs in sandboxes reject a foreign Origin).' },
  relayPort: port(8082, 'Relay listener: Envoy and peer gateways send requests for relay-only sandboxes whose supervisor session this gateway holds (0 = any free port).'),
  relayAdvertiseAddress: {
    kind: 'string',
    default: '',
    description: '`host:port` peers and Envoy use to reach this gateway\'s relay listener, published in its gateway lease (default `<listen-host>:<relay-port>`, 127.0.0.1 when listening on all addresses; in Kubernetes `$(POD_IP):8082`).',
  },
  relaySecret: {
    kind: 'string',
    default: '',
    secret: true,
    description: 'Shared secret (≥ 32 bytes, printable ASCII) keying the short-lived, target-bound credentials Envoy and peer gateways present to the relay listener. Prefer `--relay-secret-file`. Without either, a random per-process secret: peers cannot forward to this gateway.',
  },
  relaySecretFile: { kind: 'string', default: '', description: 'File with the relay secret (the same on every gateway).' },
  relayCredentialTtlMs: {
    kind: 'duration', unit: 'ms',
    default: 10_000,
    min: 1000,
    max: 300_000,
    description: 'Lifetime of the target-bound credential a relay decision carries to a relay listener (the secret itself never leaves a gateway); must cover the hop plus the clock skew between gateways.',
  },
  relayMaxStreamsPerSandbox: { kind: 'int', default: 32, min: 1, max: 100_000, description: 'Relay streams (open or opening) to one sandbox on this gateway; more get 503 relay_busy.' },
  relayMaxStreams: { kind: 'int', default: 256, min: 1, max: 1_000_000, description: 'Relay streams (open or opening) on this gateway; more get 503 relay_busy.' },
  relayMaxStreamsPerNamespace: {
    kind: 'int',
    default: -1,
    min: -1,
    max: 1_000_000,
    description: "Relay streams (open or opening) to the sandboxes of one namespace on this gateway, so one tenant's streams held unanswered leave the others theirs; more get 503 relay_busy (-1 = a quarter of `--relay-max-streams`).",
  },
  relayOpenTimeoutMs: { kind: 'duration', unit: 'ms', default: 10_000, min: 1, max: 600_000, description: 'Wait for a supervisor to open a relay stream (past it: 504 upstream_timeout).' },
  sandboxes: { kind: 'string', default: '', description: 'File driver: a YAML or JSON file of sandboxes, reloaded when it changes.' },
  drivers: {
    kind: 'list',
    default: [],
    description: 'Remote drivers over gRPC (docs/driver-contract.md): `grpc://host:port[?name=docker]`, comma-separated.',
  },
  kubernetes: { kind: 'bool', default: false, description: 'Kubernetes drivers: list and watch agent-sandbox / OpenKruise Sandbox resources (docs/kubernetes-driver.md).' },
  kubeconfig: { kind: 'string', default: '', description: 'kubeconfig file (default: KUBECONFIG, else in-cluster, else ~/.kube/config).' },
  kubeKinds: { kind: 'list', default: ['agent-sandbox', 'openkruise'], values: ['agent-sandbox', 'openkruise'], description: 'Sandbox kinds the Kubernetes drivers watch.' },
  kubeNamespaces: { kind: 'list', default: [], description: 'Namespaces the Kubernetes drivers watch (empty = all).' },
  kubeSessionModel: {
    kind: 'enum',
    default: 'required',
    values: ['required', 'none'],
    description: 'Session model of Kubernetes sandboxes without a `sandgate.dev/supervisor` annotation.',
  },
  demo: {
    kind: 'enum',
    default: 'auto',
    values: ['auto', 'on', 'off'],
    description: 'Demo mode: bundled example sandboxes with tiny upstreams on 127.0.0.x and reference supervisors. `auto` runs it when no driver is configured.',
  },
  baseDomain: { kind: 'string', default: 'localhost', description: 'Sandbox hosts are `<port>-<name>.<namespace>.<base-domain>` and `<port>-<id>.<base-domain>`.' },
  routeOrder: {
    kind: 'list',
    default: ROUTE_SOURCES,
    values: ROUTE_SOURCES,
    description: 'Route-key sources, tried in this order; the first one present in a request decides.',
  },
  defaultNamespace: { kind: 'string', default: 'default', description: 'Namespace when x-sandbox-namespace is absent.' },
  defaultPort: { kind: 'int', default: 49983, min: 1, max: 65535, description: 'Port when x-sandbox-port / e2b-sandbox-port is absent (49983: the E2B in-sandbox daemon).' },
  pathPrefix: { kind: 'string', default: '', description: 'Path routing `/<prefix>/<namespace>/<name>/<port>/<rest>`; empty turns it off.' },
  upstreamHeader: { kind: 'string', default: 'x-sandgate-upstream', description: 'Header carrying the decided upstream `<address>:<port>` to Envoy (ORIGINAL_DST).' },
  readinessWaitMs: {
    kind: 'duration', unit: 'ms',
    default: 15_000,
    min: 0,
    max: 300_000,
    description: 'How long a request for a sandbox in a readiness gap waits for it to become Ready (0 = answer at once).',
  },
  waitersPerSandbox: { kind: 'int', default: 1000, min: 0, max: 1_000_000, description: 'Requests allowed to wait for one sandbox at once; more get 503 at once.' },
  waitersTotal: { kind: 'int', default: 10_000, min: 0, max: 10_000_000, description: 'Requests allowed to wait across all sandboxes at once.' },
  waitersPerNamespace: {
    kind: 'int',
    default: -1,
    min: -1,
    max: 10_000_000,
    description: "Requests allowed to wait for the sandboxes of one namespace at once, so one tenant's flood of waits leaves the others theirs; more get 503 gateway_busy at once (-1 = a quarter of `--waiters-total`).",
  },
  watchMaxTotal: { kind: 'int', default: 1000, min: 1, max: 1_000_000, description: 'Watch streams (`/v1/sandboxes/watch`, the console\'s too) open at once on this gateway; more get 429 too_many_watches.' },
  watchMaxPerPrincipal: {
    kind: 'int',
    default: 32,
    min: 1,
    max: 1_000_000,
    description: 'Watch streams one principal (a team\'s API key; without a key, a source address) may have open; more get 429 too_many_watches.',
  },
  watchMaxBufferBytes: {
    kind: 'int',
    default: 16_777_216,
    min: 1024,
    max: 1_073_741_824,
    description: 'Bytes a watcher may be behind (unsent in its socket and queued) before it is dropped (it reconnects with Last-Event-ID and gets what it missed).',
  },
  tombstoneTtlMs: { kind: 'duration', unit: 'ms', default: 600_000, min: 0, max: 86_400_000, description: 'How long a deleted sandbox uid stays fenced against late updates.' },
  gatewayId: { kind: 'string', default: '', description: 'Name of this gateway replica in presence records and leases (default: hostname-pid). With `--workers N`, worker n is `<gateway-id>-w<n>`.' },
  supervisorPort: port(8081, 'Supervisor WebSocket endpoint `GET /v1/supervisor` (0 = any free port).'),
  supervisorSecret: {
    kind: 'string',
    default: '',
    secret: true,
    description: 'HS256 secret (≥ 32 bytes) for supervisor tokens. Prefer `--supervisor-secret-file`. Without either, the supervisor endpoint is off (the demo generates one).',
  },
  supervisorSecretFile: {
    kind: 'string',
    default: '',
    description:
      'File with the supervisor token secret, or YAML `keys: [{kid, secret}, …]` for rotation (the first signs, all verify). Re-read when it changes (and compared every heartbeat interval): sessions whose token a removed key signed are closed (4441).',
  },
  supervisorTls: {
    kind: 'bool',
    default: false,
    description: 'Serve the supervisor endpoint over TLS (`wss://`) with the pairs of `--tls-cert-file`/`--tls-dir`, or those of `--supervisor-tls-cert-file` (which turns it on by itself).',
  },
  supervisorTlsCertFile: { kind: 'string', default: '', description: 'PEM certificate chain of the supervisor endpoint, when it is not the proxy\'s; with `--supervisor-tls-key-file`. Re-read when it changes.' },
  supervisorTlsKeyFile: { kind: 'string', default: '', description: 'PEM private key of `--supervisor-tls-cert-file`.' },
  doorsTlsCertFile: {
    kind: 'string',
    default: '',
    description:
      'PEM certificate chain the doors Envoy calls (gRPC ext_authz/ext_proc, HTTP authz on the admin port, the relay listener) and the ops port serve TLS with, with `--doors-tls-key-file`; a gateway presents it to its peers\' relay listeners, which it reaches over TLS. Re-read when it changes.',
  },
  doorsTlsKeyFile: { kind: 'string', default: '', description: 'PEM private key of `--doors-tls-cert-file`.' },
  doorsClientCaFile: {
    kind: 'string',
    default: '',
    description:
      'Mutual TLS on the doors and the relay listener: only clients presenting a certificate this CA (PEM) issued complete the handshake (not on the ops port). Also the CA a gateway checks its peers\' relay listeners against. Needs `--doors-tls-cert-file`.',
  },
  supervisorAudience: { kind: 'string', default: 'sandgate-supervisor', description: 'The `aud` claim supervisor tokens must carry.' },
  heartbeatIntervalMs: {
    kind: 'duration', unit: 'ms',
    default: 1500,
    min: 50,
    max: 300_000,
    description: 'Supervisor heartbeat interval, both ways; a supervisor silent for `--heartbeat-misses` intervals is dropped (4001). Shorter finds a frozen supervisor sooner for more pings per second.',
  },
  heartbeatMisses: {
    kind: 'int',
    default: 3,
    min: 2,
    max: 100,
    description: 'Heartbeat intervals a supervisor may stay silent before its session is dropped (4001); with the defaults a frozen supervisor is dropped 4.5–4.9 s after its last frame.',
  },
  helloTimeoutMs: { kind: 'duration', unit: 'ms', default: 10_000, min: 50, max: 300_000, description: 'A supervisor socket that sends no hello within this time is closed (4408).' },
  maxSessions: { kind: 'int', default: 100_000, min: 1, max: 10_000_000, description: 'Supervisor connections this gateway accepts in all.' },
  maxSessionsPerSource: { kind: 'int', default: 1000, min: 1, max: 10_000_000, description: 'Supervisor connections with a valid token accepted from one source: an IPv4 address, or an IPv6 /64.' },
  supervisorMaxFrameBytes: { kind: 'int', default: 1_048_576, min: 1024, max: 67_108_864, description: 'Largest supervisor frame (larger closes with 1009).' },
  presence: {
    kind: 'string',
    default: 'memory',
    description: 'Presence store: `memory` (one gateway) or `redis://…` / `rediss://…` (several gateways share presence through leases).',
  },
  leaseTtlMs: {
    kind: 'duration',
    unit: 'ms',
    default: 2000,
    min: 100,
    max: 600_000,
    description: 'Gateway lease TTL in the Redis presence store (renewed every TTL/3): a killed gateway\'s sessions leave Ready everywhere within it. Longer tolerates longer gateway stalls for a longer false-Ready window.',
  },
  presenceRescanMs: { kind: 'duration', unit: 'ms', default: 30_000, min: 100, max: 3_600_000, description: 'Full re-scan of Redis presence, healing missed pub/sub messages.' },
  presenceRedisOptions: {
    kind: 'string',
    default: '',
    description:
      'JSON ioredis options for every Redis connection (presence and the API key store), e.g. Sentinel `{"sentinels":[{"host":"s1","port":26379}],"name":"mymaster"}` or Cluster `{"cluster":[{"host":"r1","port":6379}]}`; user, password and TLS come from the URL. Credentials are redacted in logs.',
  },
  presenceKeyPrefix: { kind: 'string', default: 'sandgate', description: 'Prefix of the Redis keys and channel of the presence store.' },
  presenceShards: {
    kind: 'int',
    default: 1,
    min: 1,
    max: 1024,
    description:
      'Shards of Redis presence: a sandbox lives in shard FNV-1a(`namespace/name`) mod N, keys `{prefix}` (shard 0) and `{prefix:k}`, so on Redis Cluster the shards spread over masters and a scan blocks one shard at a time. Every gateway must use the same N (a mismatch is refused: `presence_shards_mismatch`); 1 keeps the unsharded key names.',
  },
  workers: {
    kind: 'int',
    default: 1,
    min: 1,
    max: 64,
    description: 'Gateway processes sharing the listeners (node:cluster). Above 1, supervisor sessions need `--presence redis://…` so every worker sees them.',
  },
  supervisorPublicUrl: {
    kind: 'string',
    default: '',
    description:
      'The `ws://` or `wss://` URL supervisors reach this gateway\'s supervisor endpoint at, published with its presence lease: peers name it when they ask supervisors to move here (rebalancing, drain). Empty: moves name no gateway and supervisors pick another they know.',
  },
  rebalanceIntervalMs: {
    kind: 'duration',
    unit: 'ms',
    default: 2000,
    min: 0,
    max: 3_600_000,
    description: 'With Redis presence: how often a gateway compares the sessions each live gateway holds and, above its share by a margin, asks some of its supervisors to move (0: never).',
  },
  rebalanceMaxMoves: { kind: 'int', default: 100, min: 1, max: 100_000, description: 'Supervisors one gateway asks to move per rebalancing round, at most.' },
  handoverTimeoutMs: {
    kind: 'duration', unit: 'ms',
    default: 5000,
    min: 0,
    max: 600_000,
    description: 'On SIGTERM with Redis presence: how long to keep this gateway\'s records while its supervisors re-claim elsewhere (ends early once all have; at most half of --shutdown-timeout-ms).',
  },
  shutdownTimeoutMs: { kind: 'duration', unit: 'ms', default: 10_000, min: 0, max: 600_000, description: 'Upper bound on graceful shutdown after SIGTERM.' },
  apiKeys: {
    kind: 'string',
    default: '',
    description: 'Team API key store: a YAML file, or `redis://…` (keys stored only as HMAC-SHA256(pepper, key)). Empty: no API keys.',
  },
  keyPepper: { kind: 'string', default: '', secret: true, description: 'The HMAC pepper for API keys (≥ 32 bytes). Prefer `--key-pepper-file`.' },
  keyPepperFile: { kind: 'string', default: '', description: 'File holding the HMAC pepper for API keys.' },
  apiKeyNamespaces: {
    kind: 'list',
    default: ['*'],
    description: 'With an API key store: the namespaces whose sandboxes require a key (`*` = all). A team key reaches only its namespace.',
  },
  adminTeam: { kind: 'string', default: 'admin', description: 'The team whose keys reach every namespace.' },
  linkKeysFile: {
    kind: 'string',
    default: '',
    description:
      'Signed links (docs/links.md): YAML `keys: [{kid, privateKey?, publicKey?}, …]` of Ed25519 PEM keys. The first key with a private key signs, every key verifies (public keys alone suffice to verify links a control plane mints). Re-read when it changes: removing a key revokes every link it signed. Empty: links are off.',
  },
  accessPolicyFile: {
    kind: 'string',
    default: '',
    description:
      'Namespace default access policies (docs/identity.md): YAML `{default: policy, namespaces: {<namespace>: policy}}`, a policy being a list of `keys` and `{jwt: {issuer, audience?, claims?}}` rules. A sandbox\'s own `access` overrides its namespace\'s. Read at start. Empty: `keys` everywhere.',
  },
  jwtIssuersFile: {
    kind: 'string',
    default: '',
    description:
      'Workload JWT issuers (docs/identity.md): YAML `issuers: [{issuer, jwksUrl | jwks, audiences, algorithms?, team | teamClaim, clockSkewSeconds?}]` (Kubernetes: `teamClaim: kubernetes.io.namespace`). A token is a credential only on a port whose policy names its issuer; `Authorization` never reaches the sandbox. Read at start. Empty: no workload JWTs.',
  },
  linkMaxTtl: { kind: 'duration', unit: 's', default: 86_400_000, min: 1000, max: MAX_DURATION_MS, description: 'Longest lifetime of a link (`90s`, `15m`, `24h`, or seconds): longer ones are neither minted nor accepted.' },
  linkRevocationsPerNamespace: {
    kind: 'int',
    default: 1000,
    min: 1,
    max: 1_000_000,
    description: 'Unexpired link revocations one namespace may hold in the shared store (each lasts until its link would have expired); past it a revoke is refused with 429 link_revocations_exceeded.',
  },
  linkScheme: { kind: 'enum', default: 'https', values: ['https', 'http'], description: 'Scheme of the URLs links are minted for (where browsers reach the data plane).' },
  linkPort: { kind: 'int', default: 0, min: 0, max: 65535, description: 'Port of the URLs links are minted for (0: the scheme\'s default).' },
  apiKeyHeader: { kind: 'string', default: 'x-api-key', description: 'Header carrying the team API key.' },
  trafficTokenHeaders: {
    kind: 'list',
    default: ['e2b-traffic-access-token'],
    description: 'Headers that may carry a sandbox\'s traffic access token (the gateway\'s token, checked then stripped), tried in order. `x-access-token` is not in the default: E2B uses it for envd\'s own token (docs/tenancy.md).',
  },
  envdTokenHeader: {
    kind: 'string',
    default: 'x-access-token',
    description: 'Header carrying the in-sandbox daemon\'s own token (E2B envd). Forwarded to the sandbox; when a driver reports the sandbox\'s envd token, a wrong one is refused at the edge (401 envd_token_invalid). Requests to `--envd-port` need this token, not the traffic token (E2B\'s model). Empty: no edge check, and the envd port needs the traffic token like any other.',
  },
  e2bAnswers: {
    kind: 'bool',
    default: true,
    description: 'Answer requests addressed the E2B way (E2B headers, `<port>-<id>` hosts) with the statuses the E2B SDK reads: 502 for a sandbox that cannot serve, 429 for one not ready yet (docs/tenancy.md).',
  },
  envdPort: {
    kind: 'int',
    default: 49983,
    min: 1,
    max: 65535,
    description: 'Port of the in-sandbox daemon (E2B envd) whose token `--envd-token-header` carries.',
  },
  trafficTokenSecret: {
    kind: 'string',
    default: '',
    secret: true,
    description: 'Secret for derived traffic tokens: HMAC-SHA256(secret, sandbox id), hex. Prefer `--traffic-token-secret-file`.',
  },
  trafficTokenSecretFile: { kind: 'string', default: '', description: 'File holding the derived traffic token secret.' },
  stripCredentials: {
    kind: 'list',
    default: ['authorization', 'x-api-key', 'e2b-traffic-access-token'],
    description: 'Credential headers removed before a request reaches a sandbox (by every door). Remove a name to let it through. `x-access-token` (E2B envd\'s own token) is not in the default: envd needs it (docs/tenancy.md).',
  },
  autoResume: { kind: 'bool', default: false, description: 'Resume a paused sandbox when traffic arrives (a sandbox\'s own policy overrides this).' },
  idleTimeout: {
    kind: 'duration',
    unit: 's',
    default: 0,
    min: 0,
    max: MAX_DURATION_MS,
    description: 'Pause a Ready sandbox through its driver after this long without traffic, e.g. `30m` (`500ms`, `30s`, `15m`, `1h30m`, or seconds; `0` = never). A sandbox\'s own `idleTimeout` / `sandgate.dev/idle-timeout` overrides it (docs/lifecycle.md).',
  },
  activityIgnore: {
    kind: 'list',
    default: [],
    description: 'Request paths that do not count as traffic activity (health checks), e.g. `/healthz,/api/health*` (`*` matches any run of characters; the query is ignored).',
  },
  activityReportIntervalMs: {
    kind: 'duration', unit: 'ms',
    default: 10_000,
    min: 50,
    max: 600_000,
    description: 'How often a gateway publishes the activity its doors saw to its peers (one message per interval, through the presence Redis) and the lifecycle writer reports it to the drivers.',
  },
  activityReports: {
    kind: 'bool',
    default: true,
    description: 'Report activity to the drivers that take it (Kubernetes: the `sandgate.dev/last-activity` annotation; remote drivers: `ReportActivity`). Off, and with no idle timeout, console or `--metrics-namespaces`, the doors record no activity at all (docs/lifecycle.md).',
  },
  activityPatchIntervalMs: {
    kind: 'duration', unit: 'ms',
    default: 60_000,
    min: 100,
    max: 86_400_000,
    description: 'Least time between two activity reports of one sandbox to its driver (Kubernetes: the `sandgate.dev/last-activity` annotation patch); sent only when the activity moved.',
  },
  upstreamConnectRetryMs: {
    kind: 'duration', unit: 'ms',
    default: 5000,
    min: 0,
    max: 600_000,
    description: 'Embedded proxy: after a request waited for its sandbox to become Ready (a wake), how long connection-refused on the sandbox\'s port is retried (an app often listens a moment after its sandbox is Ready; 0 = no retry).',
  },
  maxRunningPerNamespace: {
    kind: 'int',
    default: 0,
    min: 0,
    max: 10_000_000,
    description: 'Sandboxes of one namespace that may run (any phase but Paused, Error and Deleting) or be waking (resumes in flight, on every gateway sharing Redis presence) before traffic may no longer wake a paused one: 429 namespace_quota_exceeded (0 = no limit).',
  },
  maxConnectionsPerSandbox: {
    kind: 'int',
    default: 1000,
    min: 0,
    max: 10_000_000,
    description: 'Embedded proxy: concurrent requests and WebSockets per sandbox (past it: 429 too_many_connections; 0 = no cap).',
  },
  tunnelsPerNamespace: {
    kind: 'int',
    default: 100,
    min: 0,
    max: 10_000_000,
    description: 'Embedded proxy: open TCP tunnels (CONNECT, the WebSocket tunnel) per namespace on this gateway (past it: 429 too_many_tunnels; 0 = no cap).',
  },
  tunnelIdleTimeout: {
    kind: 'duration',
    unit: 's',
    default: 900_000,
    min: 0,
    max: MAX_DURATION_MS,
    description: 'Embedded proxy: a TCP tunnel carrying no byte either way for this long is closed, e.g. `15m` (`500ms`, `30s`, `1h30m`, or seconds; `0` = never).',
  },
  metricsNamespaces: {
    kind: 'list',
    default: [],
    description: 'Per-namespace figures in /metrics and the console (decisions, bytes, readiness waits by `sandbox_namespace`) for these namespaces; every other namespace counts as `other`. Empty: none.',
  },
  accessLog: {
    kind: 'string',
    default: 'off',
    description: 'Access log: one JSON line per request at each door it passes (`stdout`, `stderr`, a file path, or `off`). Schema in docs/operations.md.',
  },
  logLevel: {
    kind: 'enum',
    default: 'info',
    values: ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'],
    description: 'Log level (pino).',
  },
  ...TRACING_OPTIONS,
} as const satisfies Record<string, OptionSpec>;

export type Schema = typeof SCHEMA;
export type OptionName = keyof Schema;

type ValueOf<S> = S extends { kind: 'int' | 'duration' }
  ? number
  : S extends { kind: 'bool' }
    ? boolean
    : S extends { kind: 'list' }
      ? readonly string[]
      : string;

export type Config = { readonly [K in OptionName]: ValueOf<Schema[K]> };

/** The one defaults object, derived from the schema. */
export const DEFAULTS: Config = Object.freeze(
  Object.fromEntries(Object.entries(SCHEMA).map(([k, spec]) => [k, spec.default])) as unknown as Config,
);

export function flagOf(name: string): string {
  return '--' + name.replace(/[A-Z]/g, (c) => '-' + c.toLowerCase());
}

export function envOf(name: string): string {
  const own = (SCHEMA as Record<string, OptionSpec>)[name]?.env;
  if (own !== undefined) return own;
  return 'SANDGATE_' + name.replace(/[A-Z]/g, (c) => '_' + c).toUpperCase();
}

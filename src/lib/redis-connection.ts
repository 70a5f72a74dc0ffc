import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';
import { SandgateError } from '../domain/errors.js';

/**
 * One way to build a Redis connection from configuration, for every Redis user in sandgate (the presence
 * store, the API key store): a `redis://` or `rediss://` (TLS) URL with optional username and password,
 * plus optional ioredis options (`--presence-redis-options`) that select Sentinel (`sentinels` + `name`)
 * or Cluster (`cluster: [{host, port}, …]`). Credentials are redacted wherever a target is printed.
 *
 * Every client fails fast instead of buffering: a write that waited in a queue through an outage could
 * land long after the state it describes has changed, so commands are refused while disconnected
 * (`enableOfflineQueue: false`), never re-sent after a reconnect (`autoResendUnfulfilledCommands: false`),
 * and time out (`commandTimeout`) when Redis is paused or partitioned with the socket still open. Each
 * user keeps its own record of what to write again.
 */

export type RedisClient = Redis | Cluster;

export interface ClusterNode {
  readonly host: string;
  readonly port: number;
}

/** ioredis options plus, for Redis Cluster, the seed nodes. */
export type RedisConnectionOptions = RedisOptions & { cluster?: readonly ClusterNode[] };

/** Where a Redis user connects: validated, so building a client cannot fail on configuration. */
export interface RedisTarget {
  readonly url: string;
  readonly options: RedisConnectionOptions | undefined;
}

export type RedisTopology = 'standalone' | 'sentinel' | 'cluster';

const URL_RE = /^rediss?:\/\//;

/** Validates a URL and the JSON text of `--presence-redis-options` (empty: none) into a target. */
export function redisTarget(url: string, optionsJson: string, what: string): RedisTarget {
  if (!URL_RE.test(url)) throw new SandgateError('config_invalid', `${what} must be a redis:// or rediss:// URL, not ${JSON.stringify(redactRedisUrl(url))}`);
  try {
    new URL(url);
  } catch {
    throw new SandgateError('config_invalid', `${what} is not a valid URL: ${JSON.stringify(redactRedisUrl(url))}`);
  }
  if (optionsJson === '') return { url, options: undefined };
  let parsed: unknown;
  try {
    parsed = JSON.parse(optionsJson);
  } catch (err) {
    // The JSON parser's message quotes the text, which may hold a password: say only where it broke.
    throw new SandgateError('config_invalid', 'presenceRedisOptions is not JSON', { cause: new Error((err as Error).name) });
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new SandgateError('config_invalid', 'presenceRedisOptions must be a JSON object');
  const o = parsed as Record<string, unknown>;
  const nodes = (key: string): void => {
    const v = o[key];
    if (v === undefined) return;
    const ok = Array.isArray(v) && v.length > 0 && v.every((n) => typeof n === 'object' && n !== null && typeof (n as ClusterNode).host === 'string' && Number.isInteger((n as ClusterNode).port));
    if (!ok) throw new SandgateError('config_invalid', `presenceRedisOptions.${key} must be a non-empty list of {"host": string, "port": number}`);
  };
  nodes('sentinels');
  nodes('cluster');
  if (o.sentinels !== undefined && o.cluster !== undefined) throw new SandgateError('config_invalid', 'presenceRedisOptions names both sentinels and cluster: choose one');
  if (o.sentinels !== undefined && typeof o.name !== 'string') throw new SandgateError('config_invalid', 'presenceRedisOptions.sentinels needs "name": the master group name the sentinels monitor');
  return { url, options: o as RedisConnectionOptions };
}

export function topologyOf(target: RedisTarget): RedisTopology {
  if (target.options?.cluster !== undefined && target.options.cluster.length > 0) return 'cluster';
  if (target.options?.sentinels !== undefined && target.options.sentinels.length > 0) return 'sentinel';
  return 'standalone';
}

/**
 * Reconnect backoff: 100 ms steps up to 2 s, and never give up (users report degraded meanwhile).
 * Not lib/backoff.ts: ioredis counts the attempts itself (1-based `times`), and a handful of gateways per
 * Redis need neither jitter nor exponential growth; linear steps are what docs/presence.md "Timing" promises.
 */
export function reconnectDelay(attempt: number): number {
  return Math.min(100 * attempt, 2000);
}

export interface ClientOptions {
  /** Shown in CLIENT LIST (`CLIENT SETNAME`). */
  readonly name: string;
  readonly commandTimeoutMs: number;
}

/** Builds one client, not yet connected (`lazyConnect`), so the caller attaches listeners first. */
export function createRedisClient(target: RedisTarget, opts: ClientOptions): RedisClient {
  const { cluster, ...redisOptions } = target.options ?? {};
  const failFast: RedisOptions = {
    lazyConnect: true,
    enableOfflineQueue: false,
    autoResendUnfulfilledCommands: false,
    maxRetriesPerRequest: 1,
    commandTimeout: opts.commandTimeoutMs,
    connectTimeout: Math.max(1000, opts.commandTimeoutMs * 2),
    retryStrategy: reconnectDelay,
    connectionName: opts.name,
  };
  const topology = topologyOf(target);
  if (topology === 'cluster') {
    const clusterOptions: ClusterOptions = {
      lazyConnect: true,
      enableOfflineQueue: false,
      clusterRetryStrategy: reconnectDelay,
      scaleReads: 'master',
      // A MOVED or ASK reply (a slot migrated, a replica promoted) is followed at once; the node map is
      // refreshed in the background.
      retryDelayOnMoved: 0,
      retryDelayOnFailover: 100,
      // ioredis keeps its own node-connection settings (offline queue until the lazy socket connects, no
      // per-node reconnect); the timeouts and the no-resend rule below still apply to every node.
      redisOptions: { ...credentialsOf(target.url), ...failFast, ...redisOptions },
    };
    return new Cluster(
      (cluster ?? []).map((n) => ({ host: n.host, port: n.port })),
      clusterOptions,
    );
  }
  const sentinel: RedisOptions =
    topology === 'sentinel'
      ? {
          // Sentinels announce "+switch-master" when they promote a replica: ioredis subscribes and drops
          // the connection to the old master at once, instead of writing to it until a command times out.
          failoverDetector: true,
          sentinelRetryStrategy: reconnectDelay,
          // rediss:// reaches the data nodes over TLS; the sentinels then speak TLS as well.
          enableTLSForSentinelMode: target.url.startsWith('rediss:'),
        }
      : {};
  return new Redis(target.url, { ...failFast, ...sentinel, ...redisOptions, lazyConnect: true });
}

/**
 * Keeps a client reconnecting for as long as `wanted()` holds. ioredis gives up for good (status `end`)
 * when its connector itself fails, e.g. when a Sentinel client cannot set up its connection during a
 * failover; its retryStrategy is not consulted then. Returns the function that stops it.
 */
export function keepConnecting(client: RedisClient, wanted: () => boolean): () => void {
  let attempt = 0;
  let timer: NodeJS.Timeout | undefined;
  const onEnd = (): void => {
    if (!wanted()) return;
    clearTimeout(timer);
    timer = setTimeout(() => {
      if (wanted() && client.status === 'end') client.connect().catch(() => undefined);
    }, reconnectDelay(++attempt));
    timer.unref();
  };
  const onReady = (): void => {
    attempt = 0;
  };
  client.on('end', onEnd);
  client.on('ready', onReady);
  return () => {
    clearTimeout(timer);
    client.off('end', onEnd);
    client.off('ready', onReady);
  };
}

/** User, password and TLS from a redis:// or rediss:// URL, for Cluster (whose nodes come from the list). */
function credentialsOf(url: string): RedisOptions {
  const u = new URL(url);
  const out: RedisOptions = {};
  if (u.username !== '') out.username = decodeURIComponent(u.username);
  if (u.password !== '') out.password = decodeURIComponent(u.password);
  if (u.protocol === 'rediss:') out.tls = {};
  return out;
}

const REDACTED = '[redacted]';
/** ioredis option names that hold credentials or private key material, at any depth (e.g. `tls.key`). */
const SECRET_KEYS = new Set(['password', 'username', 'sentinelPassword', 'sentinelUsername', 'key', 'passphrase', 'pfx']);

/** A URL with its username and password replaced, for logs and error messages. */
export function redactRedisUrl(url: string): string {
  // Not parsed with URL(): a malformed value must be redacted too.
  return url.replace(/^([a-z][a-z0-9+.-]*:\/\/)([^@/?#]*)@/i, (_m, scheme: string) => `${scheme}${REDACTED}@`);
}

/** Options with every credential replaced, for logs. */
export function redactRedisOptions(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(redactRedisOptions);
  if (typeof value !== 'object' || value === null) return value;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) out[k] = SECRET_KEYS.has(k) ? REDACTED : redactRedisOptions(v);
  return out;
}

/** The JSON text of `--presence-redis-options` with credentials replaced; text that does not parse is hidden whole. */
export function redactRedisOptionsText(text: string): string {
  if (text === '') return text;
  try {
    return JSON.stringify(redactRedisOptions(JSON.parse(text)));
  } catch {
    return REDACTED;
  }
}

/** How a target is printed: topology and nodes, never credentials. */
export function describeRedisTarget(target: RedisTarget): Record<string, unknown> {
  const topology = topologyOf(target);
  const o = target.options;
  return {
    topology,
    url: redactRedisUrl(target.url),
    ...(topology === 'sentinel' ? { sentinels: o?.sentinels, name: o?.name } : {}),
    ...(topology === 'cluster' ? { cluster: o?.cluster } : {}),
  };
}

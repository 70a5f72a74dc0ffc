import { Cluster, Redis, type ClusterOptions, type RedisOptions } from 'ioredis';
import type { LuaScript } from './redis-scripts.js';

/**
 * Redis clients for the presence store: standalone (redis:// or rediss://), Sentinel (ioredis
 * `sentinels` + `name`) or Cluster (a `cluster` list of seed nodes).
 *
 * All of them fail fast instead of buffering: a presence write that waited in a queue through an outage
 * could land long after the session it describes has moved elsewhere, so commands are refused while
 * disconnected (`enableOfflineQueue: false`), never re-sent after a reconnect
 * (`autoResendUnfulfilledCommands: false`), and time out (`commandTimeout`) when Redis is paused or
 * partitioned with the socket still open. The store keeps its own record of what to re-assert.
 */

export type RedisClient = Redis | Cluster;

/** ioredis options plus, for Redis Cluster, the seed nodes. */
export type PresenceRedisOptions = RedisOptions & { cluster?: ReadonlyArray<{ host: string; port: number }> };

/** Reconnect backoff: 100 ms steps up to 2 s, and never give up (the store reports degraded meanwhile). */
export function reconnectDelay(attempt: number): number {
  return Math.min(100 * attempt, 2000);
}

/** Builds one client, not yet connected (`lazyConnect`), so the caller attaches listeners first. */
export function createClient(url: string, options: PresenceRedisOptions | undefined, commandTimeoutMs: number, name: string): RedisClient {
  const { cluster, ...redisOptions } = options ?? {};
  const failFast: RedisOptions = {
    lazyConnect: true,
    enableOfflineQueue: false,
    autoResendUnfulfilledCommands: false,
    maxRetriesPerRequest: 1,
    commandTimeout: commandTimeoutMs,
    connectTimeout: Math.max(1000, commandTimeoutMs * 2),
    retryStrategy: reconnectDelay,
    connectionName: name,
  };
  if (cluster !== undefined && cluster.length > 0) {
    const clusterOptions: ClusterOptions = {
      lazyConnect: true,
      enableOfflineQueue: false,
      clusterRetryStrategy: reconnectDelay,
      scaleReads: 'master',
      // ioredis keeps its own node-connection settings (offline queue until the lazy socket connects, no
      // per-node reconnect); the timeouts and the no-resend rule below still apply to every node.
      redisOptions: { ...credentialsOf(url), ...failFast, ...redisOptions },
    };
    return new Cluster(
      cluster.map((n) => ({ host: n.host, port: n.port })),
      clusterOptions,
    );
  }
  return new Redis(url, { ...failFast, ...redisOptions, lazyConnect: true });
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

/**
 * Runs a script by its SHA1 (EVALSHA) and falls back to sending its text (EVAL) when the server does not
 * have it cached (NOSCRIPT: a restarted or failed-over server starts with an empty script cache).
 */
export async function runScript(client: RedisClient, script: LuaScript, keys: readonly string[], args: ReadonlyArray<string | number>): Promise<unknown> {
  try {
    return await client.evalsha(script.sha, keys.length, ...keys, ...args);
  } catch (err) {
    if (!(err instanceof Error) || !err.message.startsWith('NOSCRIPT')) throw err;
    return client.eval(script.lua, keys.length, ...keys, ...args);
  }
}

/** Closes a client without waiting on a server that may be gone. */
export function disconnect(client: RedisClient): void {
  client.disconnect();
}

export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

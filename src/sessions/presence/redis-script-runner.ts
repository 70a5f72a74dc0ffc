import { Cluster } from 'ioredis';
import type { RedisClient } from '../../lib/redis-connection.js';
import type { LuaScript } from './redis-scripts.js';

/**
 * Running the presence scripts over a client built by src/lib/redis-connection.ts (standalone, Sentinel or
 * Cluster), and closing it.
 */

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

/**
 * Caches `scripts` on the server (SCRIPT LOAD; on Cluster, on every master), so the EVALSHAs of a re-assert
 * burst after a restart or failover find them instead of each failing NOSCRIPT and sending the whole text.
 */
export async function loadScripts(client: RedisClient, scripts: readonly LuaScript[]): Promise<void> {
  const nodes = client instanceof Cluster ? client.nodes('master') : [client];
  await Promise.all(nodes.flatMap((node) => scripts.map((s) => node.script('LOAD', s.lua))));
}

/** Closes a client without waiting on a server that may be gone. */
export function disconnect(client: RedisClient): void {
  client.disconnect();
}

export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

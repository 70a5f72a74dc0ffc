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

/** Closes a client without waiting on a server that may be gone. */
export function disconnect(client: RedisClient): void {
  client.disconnect();
}

export function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

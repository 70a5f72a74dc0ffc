import { createHash } from 'node:crypto';
import type { RedisClient } from '../lib/redis-connection.js';

/**
 * Resumes in flight, counted by every gateway against `--max-running-per-namespace`. A gateway's own view
 * counts the sandboxes already running; what it cannot see is a wake another gateway has asked its driver
 * for and the drivers have not reported yet. Each wake therefore claims a slot in one sorted set per
 * namespace (`{prefix}:resumes:<namespace>`: member = the sandbox, score = when the claim lapses, in
 * Redis's own clock), in one script that counts and claims atomically, so six wakes arriving at six
 * gateways in the same millisecond claim at most the limit between them.
 *
 * A claim lapses by itself (its score, and the key's own expiry): a gateway that crashes mid-resume holds
 * the slot for one claim lifetime, never for ever. A claim is kept until it lapses even after the sandbox
 * runs, because a peer whose view lags still sees the sandbox paused: the script does not count a claimed
 * sandbox the caller's view already counts as running, so nothing is counted twice.
 */
export interface ResumeClaims {
  /**
   * Claims a slot for waking `sandbox` (`<namespace>/<name>`), counting `running` (the sandboxes of the
   * namespace the caller's view counts as running, fewer than `max`) and every unlapsed claim of another
   * sandbox not among them. A claim the sandbox already holds (a peer is waking it) is joined.
   */
  claim(namespace: string, sandbox: string, running: readonly string[], max: number, ttlMs: number): Promise<ResumeClaimReply>;
  /** Gives a claim back (its resume failed), only if it is still the one `token` names. */
  release(namespace: string, sandbox: string, token: string): Promise<void>;
}

export type ResumeClaimReply = { readonly ok: true; readonly token: string } | { readonly ok: false; readonly counted: number };

/**
 * KEYS[1] the namespace's set; ARGV: ttl ms, max, the sandbox, then the running sandboxes. Replies {1,
 * token} (the claim's score as Redis writes it) or {0, counted}. Reads Redis's clock (TIME, so gateways'
 * clocks do not matter); replicate_commands() lets a script write after TIME on Redis 5 and 6.
 */
const CLAIM = script(`
redis.replicate_commands()
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local held = redis.call('ZSCORE', KEYS[1], ARGV[3])
if held then return {1, held} end
local running = {}
for i = 4, #ARGV do running[ARGV[i]] = true end
local counted = #ARGV - 3
for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  if not running[m] then counted = counted + 1 end
end
if counted >= tonumber(ARGV[2]) then return {0, tostring(counted)} end
local lapses = now + tonumber(ARGV[1])
redis.call('ZADD', KEYS[1], lapses, ARGV[3])
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIREAT', KEYS[1], last[2])
return {1, redis.call('ZSCORE', KEYS[1], ARGV[3])}`);

/** KEYS[1] the namespace's set; ARGV: the sandbox, the token its claim was given. */
const RELEASE = script(`
if redis.call('ZSCORE', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('ZREM', KEYS[1], ARGV[1]) end
return 0`);

interface Script {
  readonly lua: string;
  readonly sha: string;
}

function script(lua: string): Script {
  return { lua, sha: createHash('sha1').update(lua).digest('hex') };
}

/** EVALSHA, and the script's text when the server has not cached it (NOSCRIPT: restarted or failed over). */
async function run(client: RedisClient, s: Script, key: string, args: ReadonlyArray<string | number>): Promise<unknown> {
  try {
    return await client.evalsha(s.sha, 1, key, ...args);
  } catch (err) {
    if (!(err instanceof Error) || !err.message.startsWith('NOSCRIPT')) throw err;
    return client.eval(s.lua, 1, key, ...args);
  }
}

export class RedisResumeClaims implements ResumeClaims {
  constructor(
    private readonly client: RedisClient,
    /** The presence key prefix: its hash tag puts every set beside the lifecycle lock (one Cluster slot). */
    private readonly keyPrefix: string,
  ) {}

  async claim(namespace: string, sandbox: string, running: readonly string[], max: number, ttlMs: number): Promise<ResumeClaimReply> {
    const reply = (await run(this.client, CLAIM, this.key(namespace), [ttlMs, max, sandbox, ...running])) as [number, string];
    return reply[0] === 1 ? { ok: true, token: String(reply[1]) } : { ok: false, counted: Number(reply[1]) };
  }

  async release(namespace: string, sandbox: string, token: string): Promise<void> {
    await run(this.client, RELEASE, this.key(namespace), [sandbox, token]);
  }

  private key(namespace: string): string {
    return `{${this.keyPrefix}}:resumes:${namespace}`;
  }
}

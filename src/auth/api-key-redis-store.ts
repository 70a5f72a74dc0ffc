import { createHash } from 'node:crypto';
import { createRedisClient, keepConnecting, redisTarget, type RedisClient, type RedisTarget } from '../lib/redis-connection.js';
import { parseRecord, type ApiKeyRecord, type ApiKeyStore, type RevokedLink } from './api-keys.js';

/**
 * API keys in Redis: one hash `{prefix}:apikeys` (field = key hash, value = JSON {id, team, createdAt}),
 * mirrored in memory by every gateway. Every change is published on `{prefix}:apikeys-changes`; a gateway
 * reloads the hash on each key message (revocation reaches every gateway within a round trip) and every
 * `rescanMs` to heal a missed message. Lookups read only the mirror.
 *
 * Revoked links: one script per revoke (REVOKE_LINK) adds the id to its namespace's sorted set
 * `{prefix}:revoked-links:<namespace>` (score = when the link expires; the namespace's bound is that set's
 * size once expired members are dropped) and to `{prefix}:revoked-link-ids` (every namespace's, which a
 * re-scan reads), each key expiring with its last link, and publishes `link <id>`, which every mirror adds
 * as it is — no revoke re-reads the list. The hash `{prefix}:revoked-links` (id → expiry) is still read.
 *
 * The connection is built like every other Redis connection (src/lib/redis-connection.ts): a URL, or the
 * same Sentinel / Cluster options as presence. Every key shares the `{prefix}` hash tag (one Cluster slot).
 */

/**
 * KEYS: the namespace's set, the set of every id; ARGV: id, expiry ms, bound, channel. Replies 1, or 0
 * when the namespace is full. Expired members go first (ZREMRANGEBYSCORE: each is removed once, so the
 * cost per revoke stays constant however many came before). Reads Redis's clock.
 */
const REVOKE_LINK = `
redis.replicate_commands()
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
for i = 1, 2 do
  redis.call('ZADD', KEYS[i], ARGV[2], ARGV[1])
  local last = redis.call('ZRANGE', KEYS[i], -1, -1, 'WITHSCORES')
  redis.call('PEXPIREAT', KEYS[i], last[2])
end
redis.call('PUBLISH', ARGV[4], 'link ' .. ARGV[1])
return 1`;
const REVOKE_LINK_SHA = createHash('sha1').update(REVOKE_LINK).digest('hex');

export class RedisApiKeyStore implements ApiKeyStore {
  readonly kind = 'redis' as const;
  private readonly client: RedisClient;
  private subscriber: RedisClient | undefined;
  private readonly target: RedisTarget;
  private recordsByHash = new Map<string, ApiKeyRecord>();
  private revoked = new Set<string>();
  /** Ids revoked since the running reload began: its answer may predate them. */
  private revokedDuringReload = new Set<string>();
  private timer: NodeJS.Timeout | undefined;
  private problem: string | undefined;
  private closed = false;
  private readonly hashKey: string;
  private readonly linksKey: string;
  private readonly prefix: string;
  private readonly channel: string;

  /** `target`: a redis:// URL, or a target built from configuration (Sentinel, Cluster, TLS). */
  constructor(
    target: string | RedisTarget,
    prefix: string,
    private readonly rescanMs = 30_000,
    private readonly onError: (err: Error) => void = () => undefined,
  ) {
    this.hashKey = `{${prefix}}:apikeys`;
    this.linksKey = `{${prefix}}:revoked-links`;
    this.prefix = prefix;
    this.channel = `{${prefix}}:apikeys-changes`;
    this.target = typeof target === 'string' ? redisTarget(target, '', 'apiKeys') : target;
    this.client = createRedisClient(this.target, { name: 'sandgate-api-keys', commandTimeoutMs: 2000 });
    this.client.on('error', (err: Error) => this.fail(err));
    keepConnecting(this.client, () => !this.closed);
  }

  async start(): Promise<void> {
    await this.client.connect();
    await this.reload();
    this.subscriber = createRedisClient(this.target, { name: 'sandgate-api-keys-sub', commandTimeoutMs: 2000 });
    this.subscriber.on('error', (err: Error) => this.fail(err));
    keepConnecting(this.subscriber, () => !this.closed);
    this.subscriber.on('message', (_channel: string, message: string) => {
      if (message.startsWith('link ')) this.noteRevoked(message.slice(5));
      else void this.reload();
    });
    // A reconnected subscriber may have missed messages: reload at once.
    this.subscriber.on('ready', () => void this.reload());
    await this.subscriber.connect();
    await this.subscriber.subscribe(this.channel);
    this.timer = setInterval(() => void this.reload(), this.rescanMs);
    this.timer.unref();
  }

  byHash(hash: string): ApiKeyRecord | undefined {
    return this.recordsByHash.get(hash);
  }

  isLinkRevoked(id: string): boolean {
    return this.revoked.has(id);
  }

  async list(): Promise<ApiKeyRecord[]> {
    return this.fetch();
  }

  async revokeLink(r: RevokedLink, perNamespace: number): Promise<boolean> {
    const keys = [`{${this.prefix}}:revoked-links:${r.namespace}`, this.idsKey()];
    const args = [r.id, Math.ceil(r.expiresAt * 1000), perNamespace, this.channel];
    let stored: unknown;
    try {
      stored = await this.client.evalsha(REVOKE_LINK_SHA, keys.length, ...keys, ...args);
    } catch (err) {
      if (!(err instanceof Error) || !err.message.startsWith('NOSCRIPT')) throw err;
      stored = await this.client.eval(REVOKE_LINK, keys.length, ...keys, ...args);
    }
    if (stored !== 1) return false;
    this.noteRevoked(r.id);
    return true;
  }

  async add(record: ApiKeyRecord): Promise<void> {
    await this.client.hset(this.hashKey, record.hash, JSON.stringify({ id: record.id, team: record.team, createdAt: record.createdAt }));
    await this.client.publish(this.channel, 'add');
    await this.reload();
  }

  async revoke(id: string): Promise<boolean> {
    const hit = (await this.fetch()).find((r) => r.id === id);
    if (hit === undefined) return false;
    const removed = await this.client.hdel(this.hashKey, hit.hash);
    await this.client.publish(this.channel, 'revoke');
    await this.reload();
    return removed > 0;
  }

  degraded(): string[] {
    return this.problem === undefined ? [] : [`api key store redis unreachable: ${this.problem}`];
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.timer);
    this.subscriber?.disconnect();
    this.client.disconnect();
  }

  private async fetch(): Promise<ApiKeyRecord[]> {
    const all = await this.client.hgetall(this.hashKey);
    const out: ApiKeyRecord[] = [];
    for (const [hash, json] of Object.entries(all)) {
      let v: unknown;
      try {
        v = { ...(JSON.parse(json) as object), hash };
      } catch {
        continue;
      }
      const r = parseRecord(v);
      if (r !== undefined) out.push(r);
    }
    return out;
  }

  private async reload(): Promise<void> {
    try {
      this.revokedDuringReload = new Set();
      const [records, legacy, links] = await Promise.all([this.fetch(), this.client.hkeys(this.linksKey), this.client.zrangebyscore(this.idsKey(), Date.now(), '+inf')]);
      this.recordsByHash = new Map(records.map((r) => [r.hash, r]));
      this.revoked = new Set([...legacy, ...links, ...this.revokedDuringReload]);
      this.problem = undefined;
    } catch (err) {
      // Keep the last mirror: a Redis outage must not lock every tenant out, nor let revoked keys back in.
      this.fail(err as Error);
    }
  }

  private noteRevoked(id: string): void {
    this.revoked.add(id);
    this.revokedDuringReload.add(id);
  }

  private idsKey(): string {
    return `{${this.prefix}}:revoked-link-ids`;
  }

  private fail(err: Error): void {
    this.problem = err.message;
    this.onError(err);
  }
}

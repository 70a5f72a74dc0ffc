import { createRedisClient, keepConnecting, redisTarget, type RedisClient, type RedisTarget } from '../lib/redis-connection.js';
import { parseRecord, type ApiKeyRecord, type ApiKeyStore } from './api-keys.js';

/**
 * API keys in Redis: one hash `{prefix}:apikeys` (field = key hash, value = JSON {id, team, createdAt}),
 * and revoked links in `{prefix}:revoked-links` (field = link id, value = its expiry in epoch seconds),
 * mirrored in memory by every gateway. Every change is published on `{prefix}:apikeys-changes`; a gateway
 * reloads the hash on each message (revocation reaches every gateway within a round trip) and every
 * `rescanMs` to heal a missed message. Lookups read only the mirror.
 *
 * The connection is built like every other Redis connection (src/lib/redis-connection.ts): a URL, or the
 * same Sentinel / Cluster options as presence. Both keys share the `{prefix}` hash tag (one Cluster slot).
 */
export class RedisApiKeyStore implements ApiKeyStore {
  readonly kind = 'redis' as const;
  private readonly client: RedisClient;
  private subscriber: RedisClient | undefined;
  private readonly target: RedisTarget;
  private recordsByHash = new Map<string, ApiKeyRecord>();
  private revoked = new Set<string>();
  private timer: NodeJS.Timeout | undefined;
  private problem: string | undefined;
  private closed = false;
  private readonly hashKey: string;
  private readonly linksKey: string;
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
    this.subscriber.on('message', () => void this.reload());
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

  async revokeLink(id: string, expiresAt: number): Promise<void> {
    await this.client.hset(this.linksKey, id, String(expiresAt));
    // Entries past their link's expiry guard nothing: dropped as others are added.
    const nowS = Date.now() / 1000;
    const all = await this.client.hgetall(this.linksKey);
    const dead = Object.entries(all).filter(([, exp]) => Number(exp) <= nowS).map(([k]) => k);
    if (dead.length > 0) await this.client.hdel(this.linksKey, ...dead);
    await this.client.publish(this.channel, 'revoke-link');
    await this.reload();
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
      const [records, links] = await Promise.all([this.fetch(), this.client.hkeys(this.linksKey)]);
      this.recordsByHash = new Map(records.map((r) => [r.hash, r]));
      this.revoked = new Set(links);
      this.problem = undefined;
    } catch (err) {
      // Keep the last mirror: a Redis outage must not lock every tenant out, nor let revoked keys back in.
      this.fail(err as Error);
    }
  }

  private fail(err: Error): void {
    this.problem = err.message;
    this.onError(err);
  }
}

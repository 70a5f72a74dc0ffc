import { createRedisPresence, type RedisPresence, type RedisPresenceOptions } from '../../src/sessions/presence/redis-presence.js';

/**
 * The Redis presence stores one test file makes: each over the file's defaults (read when the store is
 * made, so they may name a server started in `beforeAll`), closed together without releasing, so a store
 * left behind by a failed test cannot hold a later test's sandboxes.
 */
export class PresenceStores {
  private readonly stores: RedisPresence[] = [];

  constructor(private readonly defaults: () => Omit<RedisPresenceOptions, 'gatewayId'>) {}

  make(gatewayId: string, o: Partial<RedisPresenceOptions> = {}): RedisPresence {
    const s = createRedisPresence({ ...this.defaults(), gatewayId, ...o });
    this.stores.push(s);
    return s;
  }

  async started(gatewayId: string, o: Partial<RedisPresenceOptions> = {}): Promise<RedisPresence> {
    const s = this.make(gatewayId, o);
    await s.start();
    return s;
  }

  async closeAll(): Promise<void> {
    await Promise.all(this.stores.splice(0).map((s) => s.close({ release: false })));
  }
}

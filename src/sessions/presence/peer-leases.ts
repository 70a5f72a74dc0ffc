import type { PresenceMirror } from './presence-mirror.js';
import type { GatewayLease } from './redis-codec.js';

/**
 * The one map of live gateway leases that the hot path reads (RedisPresence.gatewayInfo: the relay lookup
 * of a peer's address) and the console lists, derived from the shards' mirrors (docs/presence.md, "Peer
 * leases across shards"). A gateway is in it while its lease is live in **at least one** shard's mirror; its
 * entry is the lease of the lowest-numbered such shard. The shards' mirrors report every change of a lease
 * (`lease` in MirrorEvents), and only that gateway's entry is re-derived, so a lookup is one Map.get.
 *
 * Why one shard suffices: this map fences nothing. A sandbox's record counts only while its gateway's lease
 * is live in the sandbox's own shard (each mirror checks that, and every Redis write re-checks it in the
 * shard, atomically), so a sandbox the view routes to a peer already has that peer's lease live in its
 * shard; requiring it in every shard only made one shard that missed the lease hide every relay sandbox
 * of the peer. Why the lowest shard: every gateway renews shard 0 first, so after a restart under the same
 * id the new incarnation's info shows there first.
 */
export class PeerLeases {
  private readonly live = new Map<string, GatewayLease>();

  /** `mirrors`: the shards' mirrors, shard 0 first. */
  constructor(private readonly mirrors: readonly PresenceMirror[]) {}

  get(gatewayId: string): GatewayLease | undefined {
    return this.live.get(gatewayId);
  }

  values(): IterableIterator<GatewayLease> {
    return this.live.values();
  }

  /** Re-derives one gateway's entry after a shard's mirror changed its lease. */
  refresh(gatewayId: string): void {
    for (const m of this.mirrors) {
      const l = m.lease(gatewayId);
      if (l !== undefined) {
        this.live.set(gatewayId, l);
        return;
      }
    }
    this.live.delete(gatewayId);
  }
}

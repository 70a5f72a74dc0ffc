import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { createLogger, MemoryLogSink } from '../../src/observability/logger.js';
import type { PresenceRecord } from '../../src/sessions/presence/presence-store.js';
import { type RedisPresence } from '../../src/sessions/presence/redis-presence.js';
import { PresenceStores } from '../helpers/presence-stores.js';
import { presenceKeys, TERM_SPAN } from '../../src/sessions/presence/redis-scripts.js';
import { eventually } from '../helpers/eventually.js';
import { startSentinelGroup, type SentinelGroup } from '../helpers/redis-sentinel.js';

/**
 * Presence on a Sentinel-managed Redis (a master, a replica, three sentinels), with the failure Sentinel
 * cannot prevent: replication is asynchronous, so the promoted replica may have lost the master's last
 * writes. The replica is made to miss them for real (CLIENT PAUSE WRITE on the replica holds back the
 * replication stream it receives while it keeps answering the sentinels), then the master is killed.
 *
 * Each test starts its own group (about 3 s until the sentinels have found each other) and fails over
 * once (about 2–4 s with down-after 500 ms).
 */

const TTL = 1000;
const PREFIX = 'ha';
/**
 * Every live session is re-asserted on the new master after the sentinels announce it (within one
 * reconnect backoff step, one renewal and a seal: docs/presence.md). The time is the redis-ha benchmark's
 * figure; this wait only turns a hang into a failure, since a loaded machine stretches any wall-clock bound.
 */
const REASSERT_WAIT_MS = 20_000;

let group: SentinelGroup;
const stores = new PresenceStores(() => ({ url: 'redis://127.0.0.1', redisOptions: group.options, leaseTtlMs: TTL, rescanMs: 60_000, keyPrefix: PREFIX, log: createLogger('silent', new MemoryLogSink()) }));

beforeEach(async () => {
  group = await startSentinelGroup();
}, 30_000);

afterEach(async () => {
  await stores.closeAll();
  await group.stop();
});

async function started(gatewayId: string, leaseTtlMs = TTL): Promise<RedisPresence> {
  const s = await stores.started(gatewayId, { leaseTtlMs });
  await eventually(() => s.degraded().length === 0, 5000, `${gatewayId} healthy`);
  return s;
}

const claim = (s: RedisPresence, name: string, sessionId: string): Promise<PresenceRecord> => s.claim('ns', name, { sessionId, instanceId: `inst-${sessionId}`, since: 1000 });
const sessionOn = (s: RedisPresence, name: string): string | undefined => s.get('ns', name)?.sessionId;

describe('Sentinel failover to a replica that lost the last writes', () => {
  it('fences every epoch (no reuse, the stale owner loses), re-asserts live sessions, and the mirrors converge', { timeout: 60_000 }, async () => {
    // A's lease outlives the failover on the promoted replica (its TTL is longer than a failover takes),
    // and A crashes before the failover: its lost release stays behind on the new master, under a lease
    // that still counts there, with nobody to collect it until the lease runs out.
    const a = await started('A', 5000);
    const b = await started('B');
    const lostOnA: PresenceRecord[] = [];
    a.onLost((r) => lostOnA.push(r));
    const master = await group.master();
    const replica = group.nodes.find((n) => n !== master)!;

    // Replicated before the pause: A holds `moved` and `released`, B holds `reused`.
    const movedOld = await claim(a, 'moved', 'm-old');
    await claim(a, 'released', 'r1');
    const reusedOld = await claim(b, 'reused', 'u1');
    await eventually(async () => (await replica.admin().hlen(presenceKeys(PREFIX).presence)) === 3, 5000, 'the replica to have the first claims');

    // The replica stops applying the replication stream; these writes reach only the master.
    await replica.admin().call('CLIENT', 'PAUSE', '1500', 'WRITE');
    const movedNew = await claim(b, 'moved', 'm-new'); // the supervisor moved from A to B
    expect(await a.release('ns', 'released', 'r1')).toBe(true); // its supervisor left
    await b.release('ns', 'reused', 'u1');
    const reusedLost = await claim(b, 'reused', 'u2'); // a claim, then a release, both to be lost
    await b.release('ns', 'reused', 'u2');
    await claim(b, 'born', 'n1'); // a brand-new sandbox the replica never hears of
    await eventually(() => lostOnA.length === 1 && sessionOn(a, 'born') === 'n1' && sessionOn(a, 'released') === undefined, 3000, 'A to see the last writes');
    expect(lostOnA[0]).toEqual(movedOld);
    expect(movedNew.epoch).toBeGreaterThan(movedOld.epoch);
    expect(reusedLost.epoch).toBe(reusedOld.epoch + 1);
    await a.close({ release: false });

    // Watch both mirrors through the failover: a sandbox whose session is gone must never show up.
    const falseReady: string[] = [];
    const watch = setInterval(() => {
      for (const s of [a, b]) {
        if (s.get('ns', 'released') !== undefined) falseReady.push(`${s.gatewayId}: released`);
        if (s.get('ns', 'reused') !== undefined) falseReady.push(`${s.gatewayId}: reused`);
      }
    }, 5);
    try {
      await master.kill();
      const newPort = await group.switched(master.port);
      expect(newPort).toBe(replica.port);
      // The promoted replica really lost the writes (a failover that loses nothing proves nothing): A's
      // release of `released` is not there. B may be re-asserting `moved`, `born` and `reused` by now, so
      // only the record nobody re-asserts (A is gone) is read here.
      const k = presenceKeys(PREFIX);
      const onReplica = replica.admin();
      expect(await onReplica.hget(k.presence, 'ns/released')).not.toBeNull();

      // Every live session is back on the new master, re-asserted with the epoch it had.
      await eventually(
        async () => {
          const now = await onReplica.hgetall(k.presence);
          const s = (f: string): string | undefined => (now[f] === undefined ? undefined : (JSON.parse(now[f]!) as { s: string }).s);
          return s('ns/moved') === 'm-new' && s('ns/born') === 'n1' && s('ns/reused') === undefined;
        },
        REASSERT_WAIT_MS,
        "B's live sessions re-asserted on the new master",
      );
      await eventually(() => b.degraded().length === 0, 5000, 'B healthy');
      expect(Number(await onReplica.hget(k.term, 't'))).toBe(1);
      // The stale owner never won: B's newer session holds `moved`; A dropped its own exactly once.
      expect(b.get('ns', 'moved')).toEqual(movedNew);
      expect(lostOnA).toHaveLength(1);
      // A's stale record is still on the new master, and A's lease still counts there: only B's rule of
      // keeping a peer's pre-failover records until that peer re-asserts keeps `released` from showing.
      expect(await onReplica.hget(k.presence, 'ns/released')).not.toBeNull();
      expect(await onReplica.zscore(k.gateways, 'A')).not.toBeNull();
    } finally {
      clearInterval(watch);
    }
    expect(falseReady).toEqual([]);

    // No epoch is handed out twice: the promoted replica's counter for `reused` is behind the lost claim
    // (u2 at reusedLost.epoch), and C never saw that claim, yet C's claim is above every epoch of the
    // old term.
    const c = await started('C');
    for (const name of ['moved', 'born', 'released']) expect(c.get('ns', name)?.sessionId).toBe(b.get('ns', name)?.sessionId);
    const next = await claim(c, 'reused', 'u3');
    expect(next.epoch).toBeGreaterThanOrEqual(TERM_SPAN + 1);
    expect(next.epoch).toBeGreaterThan(reusedLost.epoch);
    // And the mirrors follow changes on the new master although its change counter restarted lower.
    await eventually(() => sessionOn(b, 'reused') === 'u3', 3000, "B to see C's claim on the new master");
  });
});

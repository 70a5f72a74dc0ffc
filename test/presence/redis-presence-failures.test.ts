import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { createLogger, MemoryLogSink } from '../../src/observability/logger.js';
import type { PresenceRecord } from '../../src/sessions/presence/presence-store.js';
import { type RedisPresence, type RedisPresenceOptions } from '../../src/sessions/presence/redis-presence.js';
import { PresenceStores } from '../helpers/presence-stores.js';
import { presenceKeys, TERM_SPAN } from '../../src/sessions/presence/redis-scripts.js';
import { eventually } from '../helpers/eventually.js';
import { freePort, startRedisServer, startTcpRelay, type RedisServer, type TcpRelay } from '../helpers/redis-server.js';

// Failure modes: Redis killed and restarted empty, Redis hung (SIGSTOP), one gateway partitioned from
// Redis (a relay that freezes or cuts its traffic) while the supervisor moves to another gateway.

const TTL = 450;

let server: RedisServer;
let prefix = '';
let n = 0;
const stores = new PresenceStores(() => ({ url: server.url, leaseTtlMs: TTL, rescanMs: 1000, keyPrefix: prefix, log: createLogger('silent', new MemoryLogSink()) }));
const relays: TcpRelay[] = [];
const extraServers: RedisServer[] = [];

beforeAll(async () => {
  server = await startRedisServer();
});
afterAll(async () => {
  await server.stop();
});
beforeEach(() => {
  prefix = `failures-${++n}`;
});
afterEach(async () => {
  server.resume();
  await stores.closeAll();
  vi.useRealTimers();
  await Promise.all(relays.splice(0).map((r) => r.close()));
  await Promise.all(extraServers.splice(0).map((s) => s.stop()));
});

const started = (gatewayId: string, o: Partial<RedisPresenceOptions> = {}): Promise<RedisPresence> => stores.started(gatewayId, o);

async function relay(): Promise<TcpRelay> {
  const r = await startTcpRelay(server.port);
  relays.push(r);
  return r;
}

const claim = (s: RedisPresence, sessionId: string, name = 'sb'): Promise<PresenceRecord> => s.claim('ns', name, { sessionId, instanceId: `inst-${sessionId}`, since: 1000 });
const holds = (s: RedisPresence, name: string, sessionId: string) => () => s.get('ns', name)?.sessionId === sessionId;
const gone = (s: RedisPresence, name: string) => () => s.get('ns', name) === undefined;
const healthy = (...ss: RedisPresence[]) => () => ss.every((s) => s.degraded().length === 0);

/** Resolves once `gatewayId` has renewed its lease `times` more times (each renewal moves its expiry). */
async function renewals(gatewayId: string, times: number): Promise<void> {
  const expiry = (): Promise<string | null> => server.admin().zscore(presenceKeys(prefix).gateways, gatewayId);
  let last = await expiry();
  for (let i = 0; i < times; i++) {
    const seen = last;
    last = await eventually(async () => {
      const now = await expiry();
      return now !== null && now !== seen ? now : undefined;
    }, 5000, `renewal ${i + 1} of ${gatewayId}'s lease`);
  }
}

async function stored(field: string): Promise<{ s: string; e: number } | undefined> {
  const raw = await server.admin().hget(presenceKeys(prefix).presence, field);
  if (raw === null) return undefined;
  const r = JSON.parse(raw) as { s: string; e: string };
  return { s: r.s, e: Number(r.e) };
}

describe('Redis killed and restarted empty on the same port', () => {
  it('both gateways go degraded, keep serving, then re-assert and heal within one re-scan', async () => {
    // Timers and Date faked but moving with real time, so that two TTLs can be made to pass at once below.
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date'], shouldAdvanceTime: true });
    const a = await started('A');
    const b = await started('B');
    for (const id of ['a1', 'a2', 'a3']) await claim(a, id, 'a');
    const b1 = await claim(b, 'b1', 'b');
    await eventually(holds(a, 'b', 'b1'));
    await eventually(holds(b, 'a', 'a3'));

    await server.kill();
    const unreachable = (s: RedisPresence) => () => s.degraded().some((r) => r.startsWith('presence store redis unreachable: '));
    await eventually(() => unreachable(a)() && unreachable(b)(), 3000, 'both degraded');
    // The mirror is frozen, not expired: every timer due in the next two TTLs runs now, and the clocks
    // read two TTLs later; B's session still counts on A.
    vi.advanceTimersByTime(TTL * 2);
    expect(a.get('ns', 'b')).toEqual(b1);
    expect(a.gatewayLeases().map((l) => l.gatewayId)).toContain('B');
    // Local sessions still change while Redis is away.
    const offline = await claim(a, 'c1', 'c');
    expect(offline.epoch).toBe(1);
    expect(a.get('ns', 'c')).toEqual(offline);

    await server.restart();
    await eventually(() => holds(b, 'c', 'c1')() && holds(b, 'a', 'a3')() && holds(a, 'b', 'b1')() && healthy(a, b)(), 15_000, 'presence to heal');
    // The scripts were loaded once per connection before the re-assert burst: no EVALSHA missed the
    // restarted server's empty script cache (a miss would have sent the script text with EVAL).
    const stats = await server.admin().info('commandstats');
    expect(stats).toMatch(/cmdstat_script\|load:calls=\d+/);
    expect(stats).toMatch(/cmdstat_evalsha:calls=\d+/);
    expect(stats).not.toMatch(/cmdstat_eval:/);
    // The re-assert raised the reset epoch counter back to what the sessions carry.
    expect(await server.admin().hget(presenceKeys(prefix).epochs, 'ns/a')).toBe('3');
    expect((await stored('ns/a'))?.s).toBe('a3');
    // The restarted server has a new replication id, so a new term (above what the gateways saw; a store
    // that reconnected more than once may have opened more than one): a new claim is the first epoch of
    // the stored term, above every epoch of the old one, even one no gateway re-asserted.
    const term = Number(await server.admin().hget(presenceKeys(prefix).term, 't'));
    expect(term).toBeGreaterThanOrEqual(1);
    expect((await claim(b, 'b2', 'a')).epoch).toBe(term * TERM_SPAN + 1);
  });
});

describe('Redis hung (SIGSTOP)', () => {
  it('reports degraded through command timeouts, serves local sessions, and heals on SIGCONT', async () => {
    const a = await started('A');
    const b = await started('B');
    await claim(b, 'b1', 'b');
    await eventually(holds(a, 'b', 'b1'));
    server.pause();
    await eventually(() => a.degraded().length > 0, 3000, 'degraded');
    const local = await claim(a, 'a1', 'a');
    expect(a.get('ns', 'a')).toEqual(local);
    expect(a.get('ns', 'b')?.sessionId).toBe('b1');
    server.resume();
    await eventually(() => holds(b, 'a', 'a1')() && healthy(a, b)(), 3000, 'heal');
  });
});

describe('gateway A partitioned from Redis while the supervisor moves to B', () => {
  it("A's stale release after the partition heals leaves B's newer record", async () => {
    const r = await relay();
    const a = await started('A', { url: r.url });
    const b = await started('B');
    await claim(a, 's1');
    await eventually(holds(b, 'sb', 's1'));

    r.freeze();
    await eventually(gone(b, 'sb'), TTL * 4, "A's lease to lapse on B");
    const newer = await claim(b, 's2');
    expect(newer.epoch).toBe(2);
    // The old session's cleanup runs on A while A cannot reach Redis: it is queued.
    expect(await a.release('ns', 'sb', 's1')).toBe(true);

    r.thaw();
    await eventually(() => holds(a, 'sb', 's2')() && healthy(a)(), 3000, 'A to heal');
    // Two more renewals on A: its lease renewal must not bring s1 back either.
    await renewals('A', 2);
    expect(await stored('ns/sb')).toEqual(expect.objectContaining({ s: 's2', e: 2 }));
    expect(b.get('ns', 'sb')).toEqual(newer);
  });

  it("A's re-assert after the partition loses to B's newer epoch, and A closes its session (onLost)", async () => {
    const r = await relay();
    const a = await started('A', { url: r.url });
    const b = await started('B');
    const lost: PresenceRecord[] = [];
    a.onLost((rec) => lost.push(rec));
    const old = await claim(a, 's1');
    await eventually(holds(b, 'sb', 's1'));

    r.freeze();
    await eventually(gone(b, 'sb'), TTL * 4, "A's lease to lapse on B");
    const newer = await claim(b, 's2');

    r.thaw();
    await eventually(() => lost.length > 0 && healthy(a)(), 3000, 'A to learn it lost');
    expect(lost).toEqual([old]);
    expect(a.get('ns', 'sb')).toEqual(newer);
    await renewals('A', 2);
    expect(await stored('ns/sb')).toEqual(expect.objectContaining({ s: 's2', e: 2 }));
    expect(lost).toHaveLength(1);
  });

  it('a paused A whose session nobody replaced re-asserts it after its records were collected', async () => {
    const r = await relay();
    const a = await started('A', { url: r.url });
    const b = await started('B', { rescanMs: 200 });
    await claim(a, 's1');
    await eventually(holds(b, 'sb', 's1'));
    r.freeze();
    // B's re-scan collects the record of A's lapsed lease.
    await eventually(gone(b, 'sb'), TTL * 4);
    await eventually(async () => (await stored('ns/sb')) === undefined, 2000, 'the record to be collected');
    r.thaw();
    await eventually(holds(b, 'sb', 's1'), 3000, 're-assert to reach B');
    expect(await stored('ns/sb')).toEqual(expect.objectContaining({ s: 's1', e: 1 }));
  });

  it('claims and releases made while cut off are pushed when the connection returns', async () => {
    const r = await relay();
    const a = await started('A', { url: r.url, leaseTtlMs: 5000 });
    const b = await started('B', { leaseTtlMs: 5000 });
    await claim(a, 's1', 'old');
    await eventually(holds(b, 'old', 's1'));
    r.cut();
    await eventually(() => a.degraded().length > 0);
    expect(await a.release('ns', 'old', 's1')).toBe(true);
    await claim(a, 's2', 'new');
    // B still counts A's old session: A's lease is live and Redis never heard the release.
    expect(b.get('ns', 'old')?.sessionId).toBe('s1');
    r.heal();
    await eventually(() => gone(b, 'old')() && holds(b, 'new', 's2')() && healthy(a)(), 4000, 'queued writes to land');
  });
});

describe('Redis absent at start', () => {
  it('starts degraded, records claims locally, and joins when Redis appears', async () => {
    const port = await freePort();
    const a = await started('A', { url: `redis://127.0.0.1:${port}` });
    expect(a.degraded()[0]).toMatch(/^presence store redis unreachable: /);
    const rec = await claim(a, 's1');
    expect(a.get('ns', 'sb')).toEqual(rec);
    const late = await startRedisServer({ port });
    extraServers.push(late);
    await eventually(healthy(a), 4000, 'A to connect');
    // Connected is not yet written: A asserts what it recorded meanwhile in its next round, and B sees it
    // in its first load or from the channel after it.
    const b = await started('B', { url: late.url });
    await eventually(() => b.get('ns', 'sb') !== undefined, 4000, "B to see A's claim");
    expect(b.get('ns', 'sb')).toEqual(rec);
  });
});

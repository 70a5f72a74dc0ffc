import { Redis } from 'ioredis';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { RedisResumeClaims } from '../../src/lifecycle/resume-claims.js';
import { eventually } from '../helpers/eventually.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

/**
 * The shared count of resumes in flight (one sorted set per namespace, claimed by one script): a claim
 * lapses by itself, is joined rather than doubled, is given back only by its holder, and never counts a
 * sandbox the caller already counts as running.
 */
describe('resume claims in Redis', () => {
  let redis: RedisServer;
  let a: Redis;
  let b: Redis;
  let ca: RedisResumeClaims;
  let cb: RedisResumeClaims;
  beforeAll(async () => {
    redis = await startRedisServer();
    a = new Redis(redis.url);
    b = new Redis(redis.url);
    ca = new RedisResumeClaims(a, 'sg');
    cb = new RedisResumeClaims(b, 'sg');
  });
  afterAll(async () => {
    a?.disconnect();
    b?.disconnect();
    await redis?.stop();
  });
  beforeEach(async () => {
    await redis.admin().flushall();
  });

  it('claims at most the limit of many claims sent at once from two gateways', async () => {
    const replies = await Promise.all(Array.from({ length: 12 }, (_, i) => (i % 2 === 0 ? ca : cb).claim('team-a', `team-a/s${i}`, [], 3, 30_000)));
    expect(replies.filter((r) => r.ok)).toHaveLength(3);
    expect(replies.filter((r) => !r.ok).every((r) => !r.ok && r.counted === 3)).toBe(true);
    // The set expires with its last claim: nothing is left behind for ever.
    expect(await redis.admin().pttl('{sg}:resumes:team-a')).toBeGreaterThan(0);
  });

  it('joins a claim the sandbox holds, and counts neither twice nor a claimed sandbox the caller sees running', async () => {
    const first = await ca.claim('team-a', 'team-a/x', [], 2, 30_000);
    const joined = await cb.claim('team-a', 'team-a/x', [], 2, 30_000);
    expect(joined).toEqual(first);
    expect((await cb.claim('team-a', 'team-a/y', [], 2, 30_000)).ok).toBe(true);
    // Full: x and y are in flight.
    expect(await ca.claim('team-a', 'team-a/z', [], 2, 30_000)).toEqual({ ok: false, counted: 2 });
    // x runs in the caller's view now: counted once (as running), so y + x = 2, still full at 2 …
    expect(await ca.claim('team-a', 'team-a/z', ['team-a/x'], 2, 30_000)).toEqual({ ok: false, counted: 2 });
    // … and room at 3. Another namespace has its own count.
    expect((await ca.claim('team-a', 'team-a/z', ['team-a/x'], 3, 30_000)).ok).toBe(true);
    expect((await ca.claim('team-b', 'team-b/z', [], 1, 30_000)).ok).toBe(true);
  });

  it('gives a claim back only with its token', async () => {
    const held = await ca.claim('team-a', 'team-a/x', [], 1, 30_000);
    if (!held.ok) throw new Error('not claimed');
    await cb.release('team-a', 'team-a/x', '12345');
    expect((await cb.claim('team-a', 'team-a/y', [], 1, 30_000)).ok).toBe(false);
    await ca.release('team-a', 'team-a/x', held.token);
    expect((await cb.claim('team-a', 'team-a/y', [], 1, 30_000)).ok).toBe(true);
  });

  it('lets a claim whose gateway never gives it back lapse', async () => {
    expect((await ca.claim('team-a', 'team-a/crashed', [], 1, 200)).ok).toBe(true);
    expect((await cb.claim('team-a', 'team-a/next', [], 1, 30_000)).ok).toBe(false);
    await eventually(async () => (await cb.claim('team-a', 'team-a/next', [], 1, 30_000)).ok, 5000, 'the crashed claim to lapse');
  });
});

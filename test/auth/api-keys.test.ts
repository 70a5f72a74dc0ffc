import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FileApiKeyStore } from '../../src/auth/api-key-file-store.js';
import { RedisApiKeyStore } from '../../src/auth/api-key-redis-store.js';
import { ApiKeyAuth, hashKey, newApiKey } from '../../src/auth/api-keys.js';
import { eventually } from '../helpers/eventually.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

const run = promisify(execFile);
const CLI = fileURLToPath(new URL('../../dist/src/cli/main.js', import.meta.url));
/** Bounds each wait: only turns a hang into a failure; how fast a change propagates is not asserted here. */
const HANG_MS = 10_000;
const PEPPER = 'a-pepper-of-at-least-thirty-two-bytes-long';
const pepper = new TextEncoder().encode(PEPPER);

describe('API keys', () => {
  it('stores only HMAC-SHA256(pepper, key); the key maps to its team, the admin team to admin', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sandgate-keys-'));
    const store = new FileApiKeyStore(join(dir, 'keys.yaml'));
    await store.start();
    const a = newApiKey(pepper, 'team-a');
    const admin = newApiKey(pepper, 'admin');
    await store.add(a.record);
    await store.add(admin.record);
    const text = readFileSync(join(dir, 'keys.yaml'), 'utf8');
    expect(text).not.toContain(a.key);
    expect(text).toContain(hashKey(pepper, a.key));
    const auth = new ApiKeyAuth(store, pepper, 'admin');
    expect(auth.principal(a.key)).toEqual({ kind: 'team', team: 'team-a' });
    expect(auth.principal(admin.key)).toEqual({ kind: 'admin' });
    expect(auth.principal('sgk_unknown')).toEqual({ kind: 'invalid' });
    expect(auth.principal(undefined)).toEqual({ kind: 'anonymous' });
    expect(auth.principal('x'.repeat(1000))).toEqual({ kind: 'invalid' });
    // A different pepper cannot use the stored hashes.
    expect(new ApiKeyAuth(store, new TextEncoder().encode('another-pepper-another-pepper-xx'), 'admin').principal(a.key)).toEqual({ kind: 'invalid' });
    await store.close();
  });

  it('sandgate keys create / list / revoke against a file store; a watching gateway drops a revoked key without a restart', { timeout: 120_000 }, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sandgate-keys-'));
    const file = join(dir, 'keys.yaml');
    writeFileSync(join(dir, 'pepper'), PEPPER);
    const args = ['--api-keys', file, '--key-pepper-file', join(dir, 'pepper')];
    const created = JSON.parse((await run(process.execPath, [CLI, 'keys', 'create', '--team', 'team-a', ...args])).stdout) as { id: string; key: string; team: string };
    expect(created.team).toBe('team-a');
    expect(created.key).toMatch(/^sgk_/);
    const listed = (await run(process.execPath, [CLI, 'keys', 'list', ...args])).stdout;
    expect(listed).toContain(created.id);
    expect(listed).not.toContain(created.key);

    const gateway = new FileApiKeyStore(file);
    await gateway.start();
    const auth = new ApiKeyAuth(gateway, pepper, 'admin');
    expect(auth.principal(created.key)).toEqual({ kind: 'team', team: 'team-a' });
    await run(process.execPath, [CLI, 'keys', 'revoke', '--id', created.id, ...args]);
    await eventually(() => auth.principal(created.key).kind === 'invalid', HANG_MS, 'revocation to reach the watching gateway');
    await gateway.close();

    await expect(run(process.execPath, [CLI, 'keys', 'revoke', '--id', 'k_nope', ...args])).rejects.toMatchObject({ code: 2 });
    await expect(run(process.execPath, [CLI, 'keys', 'create', '--team', 'Team_A', ...args])).rejects.toMatchObject({ code: 2 });
  });

  describe('Redis store', () => {
    let redis: RedisServer;
    beforeAll(async () => {
      redis = await startRedisServer();
    });
    afterAll(() => redis.stop());

    it('revocation reaches every gateway by its published message, and a lookup never calls Redis', async () => {
      const a = new RedisApiKeyStore(redis.url, 'sandgate');
      // B's periodic re-scan never runs during the test, so only the published message can bring it a change.
      const b = new RedisApiKeyStore(redis.url, 'sandgate', 3_600_000);
      await a.start();
      await b.start();
      try {
        const k = newApiKey(pepper, 'team-b');
        await a.add(k.record);
        const authB = new ApiKeyAuth(b, pepper, 'admin');
        await eventually(() => authB.principal(k.key).kind === 'team', HANG_MS, 'the new key on gateway B');
        const admin = redis.admin();
        const before = Number((/cmdstat_hgetall:calls=(\d+)/.exec(await admin.info('commandstats')) ?? [])[1] ?? 0);
        for (let i = 0; i < 1000; i++) authB.principal(k.key);
        const after = Number((/cmdstat_hgetall:calls=(\d+)/.exec(await admin.info('commandstats')) ?? [])[1] ?? 0);
        expect(after).toBe(before);
        expect(await a.revoke(k.record.id)).toBe(true);
        await eventually(() => authB.principal(k.key).kind === 'invalid', HANG_MS, 'revocation on gateway B');
      } finally {
        await a.close();
        await b.close();
      }
    });

    it('keeps the last mirror while Redis is down and reports degraded', async () => {
      const s = new RedisApiKeyStore(redis.url, 'degraded-test');
      await s.start();
      const k = newApiKey(pepper, 'team-c');
      await s.add(k.record);
      await redis.kill();
      try {
        await eventually(() => s.degraded().length > 0, HANG_MS, 'degraded');
        expect(new ApiKeyAuth(s, pepper, 'admin').principal(k.key)).toEqual({ kind: 'team', team: 'team-c' });
      } finally {
        await redis.restart();
        await s.close();
      }
    });
  });
});

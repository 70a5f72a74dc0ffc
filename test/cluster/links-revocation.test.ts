import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisApiKeyStore } from '../../src/auth/api-key-redis-store.js';
import { newApiKey } from '../../src/auth/api-keys.js';
import { eventually } from '../helpers/eventually.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { ed25519Pem, writeLinkKeys } from '../helpers/link-keys.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { rawRequest, startUpstream } from '../helpers/upstream.js';

const run = promisify(execFile);
const CLI = fileURLToPath(new URL('../../dist/src/cli/main.js', import.meta.url));
const PEPPER = 'a-pepper-of-at-least-thirty-two-bytes-long';

/**
 * Two gateways sharing one Redis API key store: a link minted by `sandgate link` on one opens the sandbox
 * on both; `sandgate link revoke` (the store, not a gateway) closes it, and every cookie it set, on both;
 * removing the signing key from the keys file closes every link it signed.
 */
describe('signed links across gateways', () => {
  let redis: RedisServer;
  let dir: string;
  let a: TestGateway;
  let b: TestGateway;
  let up: Awaited<ReturnType<typeof startUpstream>>;
  let adminKey: string;
  let teamAKey: string;
  let teamBKey: string;
  const keyA = ed25519Pem();
  const keyB = ed25519Pem();

  beforeAll(async () => {
    redis = await startRedisServer();
    dir = await mkdtemp(join(tmpdir(), 'sandgate-link-cluster-'));
    await writeLinkKeys(join(dir, 'links.yaml'), [{ kid: 'a', privateKey: keyA.privateKey }]);
    const store = new RedisApiKeyStore(redis.url, 'sandgate');
    await store.start();
    const admin = newApiKey(new TextEncoder().encode(PEPPER), 'admin');
    await store.add(admin.record);
    const teamA = newApiKey(new TextEncoder().encode(PEPPER), 'team-a');
    const teamB = newApiKey(new TextEncoder().encode(PEPPER), 'team-b');
    await store.add(teamA.record);
    await store.add(teamB.record);
    await store.close();
    adminKey = admin.key;
    teamAKey = teamA.key;
    teamBKey = teamB.key;
    up = await startUpstream((req, res) => res.end(`sandbox saw cookie=${req.headers.cookie ?? ''}`));
    const sandboxes = () => new TestDriver([snapshot({ name: 'web', sessionModel: 'none', endpoint: { kind: 'address', addresses: ['127.0.0.1'] } })]);
    const common = { linkKeysFile: join(dir, 'links.yaml'), linkScheme: 'http', apiKeys: redis.url, keyPepper: PEPPER, linkRevocationsPerNamespace: 3 };
    a = await startTestGateway([sandboxes()], { ...common, gatewayId: 'gw-a' });
    b = await startTestGateway([sandboxes()], { ...common, gatewayId: 'gw-b' });
  });
  afterAll(async () => {
    await a?.close();
    await b?.close();
    await up?.close();
    await redis?.stop();
    await rm(dir, { recursive: true, force: true });
  });

  const host = () => `${up.port}-web.team-a.localhost`;
  async function mint(): Promise<{ url: string; id: string }> {
    const { stdout, stderr } = await run(process.execPath, [CLI, 'link', '--namespace', 'team-a', '--name', 'web', '--port', String(up.port), '--ttl', '10m', '--api-url', a.admin, '--api-key', adminKey]);
    return { url: stdout.trim(), id: /^id (\S+),/.exec(stderr)![1]! };
  }
  /** Opens the link on a gateway: its cookie. */
  async function open(g: TestGateway, url: string): Promise<string> {
    const u = new URL(url);
    const r = await rawRequest(g.gw.proxyPort!, u.pathname + u.search, { host: host() });
    expect(r.status).toBe(303);
    return r.headers['set-cookie']![0]!.split(';')[0]!;
  }
  const code = async (g: TestGateway, cookie: string) => {
    const r = await rawRequest(g.gw.proxyPort!, '/', { host: host(), cookie: `${cookie}; own=1` });
    return r.status === 200 ? r.body : r.headers['x-sandgate-error'];
  };

  it('a link minted by the CLI opens the sandbox through either gateway; revoking it closes both, cookies included', async () => {
    const { url, id } = await mint();
    expect(url).toMatch(new RegExp(`^http://${up.port}-web\\.team-a\\.localhost/\\?sandgate_token=`));
    const cookieA = await open(a, url);
    const cookieB = await open(b, url);
    expect(await code(a, cookieA)).toBe('sandbox saw cookie=own=1');
    expect(await code(b, cookieA)).toBe('sandbox saw cookie=own=1');
    await run(process.execPath, [CLI, 'link', 'revoke', '--id', id, '--api-keys', redis.url]);
    await eventually(async () => (await code(a, cookieA)) === 'link_revoked' && (await code(b, cookieB)) === 'link_revoked', 10_000, 'both gateways to refuse the revoked link');
    const again = await rawRequest(b.gw.proxyPort!, new URL(url).pathname + new URL(url).search, { host: host() });
    expect(again.headers['x-sandgate-error']).toBe('link_revoked');
  });

  it("a team revokes only its own namespace's links, within its bound, each held in Redis for the link's remaining lifetime", async () => {
    const minted = await fetch(`${a.admin}/v1/sandboxes/team-a/web/links`, { method: 'POST', headers: { 'x-api-key': teamAKey }, body: JSON.stringify({ port: up.port, ttlSeconds: 120 }) });
    const { url, id } = (await minted.json()) as { url: string; id: string };
    const cookie = await open(a, url);
    const del = (g: TestGateway, key: string, linkId: string) => fetch(`${g.admin}/v1/links/${linkId}`, { method: 'DELETE', headers: { 'x-api-key': key } });
    const foreign = await del(b, teamBKey, id);
    const madeUp = await del(b, teamBKey, id.replace(/[\w-]{16}$/, 'AAAAAAAAAAAAAAAA'));
    expect(foreign.status).toBe(404);
    expect(await foreign.text()).toBe(await madeUp.text());
    expect(await code(a, cookie)).toBe('sandbox saw cookie=own=1');
    expect((await del(b, teamAKey, id)).status).toBe(200);
    await eventually(async () => (await code(a, cookie)) === 'link_revoked', 10_000, 'gateway a to refuse the revoked link');
    // One sorted set per namespace, each link held until it expires (120 s, plus the skew allowed).
    const lapses = Number(await redis.admin().zscore('{sandgate}:revoked-links:team-a', id)) - Date.now();
    expect(lapses).toBeGreaterThan(100_000);
    expect(lapses).toBeLessThanOrEqual(180_000);
    expect(await redis.admin().pttl('{sandgate}:revoked-links:team-a')).toBeGreaterThan(0);
    // The bound (3) is shared by every gateway, whichever gateway took each revocation.
    let last: Response | undefined;
    for (const [i, g] of [a, b, a, b].entries()) {
      last = await del(g, teamAKey, id.replace(/[\w-]{16}$/, String(i).repeat(16)));
      if (last.status !== 200) break;
    }
    expect([last!.status, ((await last!.json()) as { code: string }).code]).toEqual([429, 'link_revocations_exceeded']);
    expect(await redis.admin().zcard('{sandgate}:revoked-links:team-a')).toBe(3);
  });

  it('removing the signing key from the keys file revokes every link it signed', async () => {
    const { url } = await mint();
    const cookie = await open(a, url);
    await writeLinkKeys(join(dir, 'links.yaml'), [{ kid: 'b', privateKey: keyB.privateKey }]);
    await eventually(async () => (await code(a, cookie)) === 'link_invalid' && (await code(b, cookie)) === 'link_invalid', 10_000, 'both gateways to drop key a');
  });

  it('refuses a revoke without the store, and a malformed id', async () => {
    await expect(run(process.execPath, [CLI, 'link', 'revoke', '--id', 'l_x'])).rejects.toMatchObject({ code: 2, stderr: expect.stringMatching(/config_invalid: revoking links needs/) });
    await expect(run(process.execPath, [CLI, 'link', 'revoke', '--id', 'bad id!', '--api-keys', redis.url])).rejects.toMatchObject({ code: 2, stderr: expect.stringMatching(/invalid_request/) });
  });
});

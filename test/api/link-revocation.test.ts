import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FileApiKeyStore } from '../../src/auth/api-key-file-store.js';
import { newApiKey } from '../../src/auth/api-keys.js';
import { RevocationJournal } from '../../src/auth/revocation-journal.js';
import { eventually } from '../helpers/eventually.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { ed25519Pem, writeLinkKeys } from '../helpers/link-keys.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { rawRequest, startUpstream } from '../helpers/upstream.js';

/**
 * Revoking links as tenants: a team revokes only links of its own namespace (another team's link is
 * answered exactly as a made-up id of that namespace, and keeps working); revocations are bounded per
 * namespace; and a revoke with the file store appends one line beside the key file, never rewriting it.
 */

const PEPPER = 'pepper-for-link-revocation-tests-0123456789';
const BOUND = 5;
/** An id of the shape sandgate mints, naming `ns`, that no link has. */
const madeUp = (ns: string) => `l_${ns}_${Math.floor(Date.now() / 1000 + 600).toString(36)}_${randomBytes(12).toString('base64url')}`;

describe('revoking links, tenant by tenant', () => {
  let dir: string;
  let t: TestGateway;
  let up: Awaited<ReturnType<typeof startUpstream>>;
  const keys: Record<string, string> = {};

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sandgate-revoke-'));
    await writeLinkKeys(join(dir, 'links.yaml'), [{ kid: 'k1', privateKey: ed25519Pem().privateKey }]);
    const store = new FileApiKeyStore(join(dir, 'keys.yaml'));
    for (const team of ['team-a', 'team-b', 'admin']) {
      const k = newApiKey(new TextEncoder().encode(PEPPER), team);
      await store.add(k.record);
      keys[team] = k.key;
    }
    up = await startUpstream((_req, res) => res.end('sandbox'));
    const at = { kind: 'address' as const, addresses: ['127.0.0.1'] };
    t = await startTestGateway(
      [new TestDriver([snapshot({ name: 'web', sessionModel: 'none', endpoint: at }), snapshot({ namespace: 'team-b', name: 'web', uid: 'uid-b', sessionModel: 'none', endpoint: at })])],
      { linkKeysFile: join(dir, 'links.yaml'), linkScheme: 'http', apiKeys: join(dir, 'keys.yaml'), keyPepper: PEPPER, linkRevocationsPerNamespace: BOUND },
    );
  });
  afterAll(async () => {
    await t?.close();
    await up?.close();
    await rm(dir, { recursive: true, force: true });
  });

  const host = (ns: string) => `${up.port}-web.${ns}.localhost`;
  async function mint(team: string, ns = team): Promise<{ url: string; id: string }> {
    const r = await fetch(`${t.admin}/v1/sandboxes/${ns}/web/links`, { method: 'POST', headers: { 'x-api-key': keys[team]! }, body: JSON.stringify({ port: up.port }) });
    expect(r.status).toBe(201);
    return (await r.json()) as { url: string; id: string };
  }
  async function cookieOf(url: string, ns: string): Promise<string> {
    const u = new URL(url);
    const r = await rawRequest(t.gw.proxyPort!, u.pathname + u.search, { host: host(ns) });
    return r.headers['set-cookie']![0]!.split(';')[0]!;
  }
  const through = async (cookie: string, ns: string) => {
    const r = await rawRequest(t.gw.proxyPort!, '/', { host: host(ns), cookie });
    return r.status === 200 ? r.body : r.headers['x-sandgate-error'];
  };
  const revoke = async (team: string, id: string) => {
    const r = await fetch(`${t.admin}/v1/links/${id}`, { method: 'DELETE', headers: { 'x-api-key': keys[team]! } });
    return { status: r.status, body: await r.text() };
  };

  it("answers another team's link exactly as a made-up id, and the link keeps working", async () => {
    const link = await mint('team-a');
    expect(link.id).toMatch(/^l_team-a_[0-9a-z]+_[\w-]{16}$/);
    const cookie = await cookieOf(link.url, 'team-a');
    const foreign = await revoke('team-b', link.id);
    const missing = await revoke('team-b', madeUp('team-a'));
    expect(foreign.status).toBe(404);
    expect(JSON.parse(foreign.body).code).toBe('link_not_found');
    expect(foreign.body).toBe(missing.body);
    expect(await through(cookie, 'team-a')).toBe('sandbox');
    // An id naming no namespace (minted outside sandgate) is the admin team's to revoke only.
    expect((await revoke('team-b', 'l_legacyid0123456')).body).toBe(missing.body);
    expect((await revoke('admin', 'l_legacyid0123456')).status).toBe(200);
    // Its own team revokes it.
    expect(await revoke('team-a', link.id)).toEqual({ status: 200, body: JSON.stringify({ id: link.id, revoked: true }) });
    expect(await through(cookie, 'team-a')).toBe('link_revoked');
  });

  it('refuses revocations past the namespace bound with 429 link_revocations_exceeded, leaving other namespaces theirs', async () => {
    const statuses: number[] = [];
    // One is held from the test before; the bound counts unexpired revocations of the namespace.
    for (let i = 0; i < BOUND; i++) statuses.push((await revoke('team-a', madeUp('team-a'))).status);
    expect(statuses).toEqual([200, 200, 200, 200, 429]);
    const refused = await revoke('team-a', madeUp('team-a'));
    expect(refused.status).toBe(429);
    expect(JSON.parse(refused.body)).toMatchObject({ code: 'link_revocations_exceeded' });
    // Revoking what is already revoked takes no room; another namespace has its own bound.
    const link = await mint('team-b');
    expect((await revoke('team-b', link.id)).status).toBe(200);
    expect((await revoke('team-b', link.id)).status).toBe(200);
  });

  it('revokes by appending to the journal: the key file is never rewritten', async () => {
    const keysFile = join(dir, 'keys.yaml');
    const before = await stat(keysFile);
    const text = await readFile(keysFile, 'utf8');
    const journal = `${keysFile}.revocations`;
    const lines = async () => (await readFile(journal, 'utf8')).split('\n').filter((l) => l !== '').length;
    const had = await lines();
    for (let i = 0; i < 3; i++) expect((await revoke('admin', madeUp(`ns-${i}`))).status).toBe(200);
    const after = await stat(keysFile);
    expect([after.ino, after.mtimeMs, await readFile(keysFile, 'utf8')]).toEqual([before.ino, before.mtimeMs, text]);
    expect(await lines()).toBe(had + 3);
  });
});

describe('the revocation journal', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sandgate-journal-'));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('is shared: what one process appends, another watching the same file reads', async () => {
    const path = join(dir, 'shared.revocations');
    const a = new RevocationJournal(path, () => undefined);
    const b = new RevocationJournal(path, () => undefined);
    await a.start();
    await b.start();
    try {
      await a.append({ id: 'l_x', namespace: 'team-a', expiresAt: Date.now() / 1000 + 600 });
      await eventually(() => b.has('l_x'), 5000, 'the other journal to read the append');
      expect(b.live('team-a')).toBe(1);
      expect(a.appends).toBe(1);
    } finally {
      a.close();
      b.close();
    }
  });

  it('rotates into the previous generation only once everything there expired, and still reads both', async () => {
    let now = 1_000_000_000_000;
    const path = join(dir, 'rotating.revocations');
    const j = new RevocationJournal(path, () => undefined, 100, () => now);
    await j.start();
    try {
      const nowS = () => now / 1000;
      await j.append({ id: 'l_first', namespace: 'a', expiresAt: nowS() + 60 });
      await j.append({ id: 'l_second', namespace: 'a', expiresAt: nowS() + 60 });
      await j.append({ id: 'l_third', namespace: 'a', expiresAt: nowS() + 600 });
      // Past 100 bytes with nothing in a previous generation: rotated, and everything still revoked.
      expect((await readFile(`${path}.old`, 'utf8')).split('\n')).toHaveLength(4);
      expect(['l_first', 'l_second', 'l_third'].every((id) => j.has(id))).toBe(true);
      for (const id of ['l_4', 'l_5', 'l_6']) await j.append({ id, namespace: 'a', expiresAt: nowS() + 60 });
      // The previous generation holds a live revocation (l_third): no rotation over it.
      expect((await readFile(path, 'utf8')).split('\n')).toHaveLength(4);
      expect(j.has('l_third')).toBe(true);
      now += 601_000;
      await j.append({ id: 'l_7', namespace: 'a', expiresAt: nowS() + 60 });
      expect(j.has('l_7') && j.has('l_6')).toBe(true);
      expect(j.has('l_third')).toBe(false);
    } finally {
      j.close();
    }
  });
});

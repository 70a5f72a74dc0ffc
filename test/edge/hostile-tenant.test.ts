import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FileApiKeyStore } from '../../src/auth/api-key-file-store.js';
import { newApiKey } from '../../src/auth/api-keys.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { json, startTestGateway, type TestGateway } from '../helpers/gateway.js';

/**
 * The hostile tenant (issue 10): what a team holding its own key, or no key at all, can try against the
 * surfaces around the doors. Beside the tenant matrix (tenancy.test.ts), which covers the doors' own
 * decisions. Each block is one finding, through every door it applies to.
 */

const PEPPER = 'pepper-for-hostile-tests-0123456789abcdef012345';

/** Two teams and the admin team in a key file; returns the file, the pepper file and the keys. */
async function teamKeys(): Promise<{ keysFile: string; pepperFile: string; keys: Record<'admin' | 'team-a' | 'team-b' | 'revoked', string> }> {
  const dir = mkdtempSync(join(tmpdir(), 'sandgate-hostile-'));
  const keysFile = join(dir, 'keys.yaml');
  const pepperFile = join(dir, 'pepper');
  writeFileSync(pepperFile, PEPPER);
  const store = new FileApiKeyStore(keysFile);
  const pepper = new TextEncoder().encode(PEPPER);
  const keys = {} as Record<'admin' | 'team-a' | 'team-b' | 'revoked', string>;
  for (const team of ['admin', 'team-a', 'team-b', 'revoked'] as const) {
    const { key, record } = newApiKey(pepper, team === 'revoked' ? 'team-a' : team);
    await store.add(record);
    keys[team] = key;
    if (team === 'revoked') await store.revoke(record.id);
  }
  return { keysFile, pepperFile, keys };
}

interface SseEvent {
  id?: string;
  event: string;
  data: any;
}

/** Reads SSE events from a fetch body until `count` events arrived (comments skipped). */
async function readEvents(res: Response, count: number): Promise<SseEvent[]> {
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  const out: SseEvent[] = [];
  while (out.length < count) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let i: number;
    while ((i = buf.indexOf('\n\n')) >= 0 && out.length < count) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (block.startsWith(':')) continue;
      const ev: SseEvent = { event: 'message', data: undefined };
      for (const line of block.split('\n')) {
        const [k, ...rest] = line.split(': ');
        if (k === 'id') ev.id = rest.join(': ');
        else if (k === 'event') ev.event = rest.join(': ');
        else if (k === 'data') ev.data = JSON.parse(rest.join(': '));
      }
      out.push(ev);
    }
  }
  await reader.cancel();
  return out;
}

describe('finding 3: the operator API answers with the doors\' principals', () => {
  let t: TestGateway;
  let driver: TestDriver;
  let keys: Awaited<ReturnType<typeof teamKeys>>['keys'];
  const as = (who: keyof typeof keys | 'none'): Record<string, string> => (who === 'none' ? {} : { 'x-api-key': keys[who] });

  beforeAll(async () => {
    const k = await teamKeys();
    keys = k.keys;
    driver = new TestDriver([
      snapshot({ namespace: 'team-a', name: 'web', uid: 'a1', sessionModel: 'none' }),
      snapshot({ namespace: 'team-b', name: 'web', uid: 'b1', sessionModel: 'none', ids: ['b-secret-id'] }),
      snapshot({ namespace: 'team-b', name: 'db', uid: 'b2', sessionModel: 'none' }),
    ]);
    t = await startTestGateway([driver], { apiKeys: k.keysFile, keyPepperFile: k.pepperFile, readinessWaitMs: 0 });
  });
  afterAll(() => t.close());

  const names = async (who: keyof typeof keys | 'none', query = ''): Promise<string[]> => {
    const r = await fetch(`${t.admin}/v1/sandboxes${query}`, { headers: as(who) });
    expect(r.status).toBe(200);
    return (await json(r)).items.map((s: any) => `${s.namespace}/${s.name}`).sort();
  };

  it('list: a team sees only its namespace, the admin team everything, even when asking for another namespace', async () => {
    expect(await names('team-a')).toEqual(['team-a/web']);
    expect(await names('team-b')).toEqual(['team-b/db', 'team-b/web']);
    expect(await names('admin')).toEqual(['team-a/web', 'team-b/db', 'team-b/web']);
    expect(await names('team-a', '?namespace=team-b')).toEqual([]);
  });

  it('no key → 401 api_key_required, a revoked key → 401 api_key_invalid, on every sandbox route', async () => {
    for (const path of ['/v1/sandboxes', '/v1/sandboxes/team-b/web', '/v1/sandboxes/watch']) {
      const none = await fetch(t.admin + path);
      expect([path, none.status, (await json(none)).code]).toEqual([path, 401, 'api_key_required']);
      const revoked = await fetch(t.admin + path, { headers: as('revoked') });
      expect([path, revoked.status, (await json(revoked)).code]).toEqual([path, 401, 'api_key_invalid']);
    }
  });

  it("one sandbox: another team's answers exactly like a missing one", async () => {
    const own = await fetch(`${t.admin}/v1/sandboxes/team-a/web`, { headers: as('team-a') });
    expect(own.status).toBe(200);
    const other = await fetch(`${t.admin}/v1/sandboxes/team-b/web`, { headers: as('team-a') });
    const missing = await fetch(`${t.admin}/v1/sandboxes/team-b/nope`, { headers: as('team-a') });
    const [o, m] = [await other.text(), await missing.text()];
    expect(other.status).toBe(404);
    expect(JSON.parse(o).code).toBe('sandbox_not_found');
    // Same status, same body shape: only the echoed name differs, as it does between two missing sandboxes.
    expect(o.replace('team-b/web', 'X')).toBe(m.replace('team-b/nope', 'X'));
    expect(o).not.toContain('b-secret-id');
    const admin = await fetch(`${t.admin}/v1/sandboxes/team-b/web`, { headers: as('admin') });
    expect((await json(admin)).ids).toEqual(['b-secret-id']);
  });

  it('the watch is filtered per principal: full state and every later change', async () => {
    const res = await fetch(`${t.admin}/v1/sandboxes/watch`, { headers: as('team-a') });
    expect(res.status).toBe(200);
    const pending = readEvents(res, 4);
    // The full state was written with the response head: reset, upsert team-a/web, synced — then, after
    // team-b changes it must not see, team-a's change.
    driver.upsert(snapshot({ namespace: 'team-b', name: 'web', uid: 'b1', resourceVersion: '2', sessionModel: 'none', ids: ['b-secret-id'] }));
    driver.upsert(snapshot({ namespace: 'team-b', name: 'db', uid: 'b2', resourceVersion: '2', sessionModel: 'none' }));
    driver.upsert(snapshot({ namespace: 'team-a', name: 'web', uid: 'a1', resourceVersion: '2', sessionModel: 'none' }));
    const events = await pending;
    expect(events.map((e) => (e.event === 'upsert' ? `upsert ${e.data.namespace}/${e.data.name}` : e.event))).toEqual(['reset', 'upsert team-a/web', 'synced', 'upsert team-a/web']);
    expect(events[3]!.data.resourceVersion).toBe('2');
  });
});

describe('finding 3: the decision door and the operator surface on separate listeners (--ops-port)', () => {
  let t: TestGateway;
  beforeAll(async () => {
    t = await startTestGateway([new TestDriver([snapshot({ namespace: 'team-a', name: 'web', sessionModel: 'none' })])], { opsPort: 0, opsListenHost: '127.0.0.1' });
  });
  afterAll(() => t.close());

  it('the admin port keeps /authz/ and health; the sandbox API, watch and metrics move to the ops port', async () => {
    const ops = `http://127.0.0.1:${t.gw.opsPort!}`;
    expect(t.gw.opsPort).not.toBe(t.gw.adminPort);
    for (const path of ['/v1/sandboxes', '/v1/sandboxes/team-a/web', '/v1/sandboxes/watch', '/metrics']) {
      const r = await fetch(t.admin + path);
      expect([path, r.status, (await json(r)).code]).toEqual([path, 404, 'not_found']);
    }
    expect((await fetch(`${t.admin}/healthz`)).status).toBe(200);
    expect((await fetch(`${t.admin}/readyz`)).status).toBe(200);
    const allow = await fetch(`${t.admin}/authz/`, { headers: { 'x-sandbox-namespace': 'team-a', 'x-sandbox-id': 'web' } });
    expect(allow.status).toBe(200);
    expect((await json(await fetch(`${ops}/v1/sandboxes`))).items).toHaveLength(1);
    expect((await fetch(`${ops}/metrics`)).status).toBe(200);
    expect((await fetch(`${ops}/healthz`)).status).toBe(200);
    // The door is not on the ops port.
    const door = await fetch(`${ops}/authz/`, { headers: { 'x-sandbox-namespace': 'team-a', 'x-sandbox-id': 'web' } });
    expect([door.status, (await json(door)).code]).toEqual([404, 'not_found']);
  });
});

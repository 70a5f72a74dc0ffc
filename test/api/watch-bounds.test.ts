import { mkdtempSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FileApiKeyStore } from '../../src/auth/api-key-file-store.js';
import { newApiKey } from '../../src/auth/api-keys.js';
import { eventually } from '../helpers/eventually.js';
import { json, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { snapshot } from '../helpers/snapshots.js';
import { readEvents } from '../helpers/sse.js';
import { TestDriver } from '../helpers/test-driver.js';

/**
 * Watch streams (`/v1/sandboxes/watch`, the console's) are a shared resource: bounded per principal and
 * in total (429 too_many_watches), each change serialized once for every watcher allowed to see it
 * (counted by the gateway's own metric), and a watcher that stops reading dropped instead of buffered.
 */

const PEPPER = 'pepper-for-watch-bounds-0123456789abcdef01234567';

async function keys(): Promise<{ keysFile: string; pepperFile: string; key: Record<'admin' | 'team-a' | 'team-b', string> }> {
  const dir = mkdtempSync(join(tmpdir(), 'sandgate-watch-'));
  const keysFile = join(dir, 'keys.yaml');
  const pepperFile = join(dir, 'pepper');
  writeFileSync(pepperFile, PEPPER);
  const store = new FileApiKeyStore(keysFile);
  const key = {} as Record<'admin' | 'team-a' | 'team-b', string>;
  for (const team of ['admin', 'team-a', 'team-b'] as const) {
    const made = newApiKey(new TextEncoder().encode(PEPPER), team);
    await store.add(made.record);
    key[team] = made.key;
  }
  return { keysFile, pepperFile, key };
}

describe('watch streams: bounded, shared, slow watchers dropped', () => {
  let t: TestGateway;
  let driver: TestDriver;
  let key: Awaited<ReturnType<typeof keys>>['key'];
  let rv = 1;
  const streams: Response[] = [];
  const sockets: Socket[] = [];

  const upsert = (namespace: string, name: string, pad = ''): void =>
    driver.upsert(snapshot({ namespace, name, uid: `${namespace}-${name}`, resourceVersion: String(++rv), sessionModel: 'none', ...(pad === '' ? {} : { ids: [pad] }) }));

  const watch = async (who: keyof typeof key, query = ''): Promise<Response> => {
    const res = await fetch(`${t.admin}/v1/sandboxes/watch${query}`, { headers: { 'x-api-key': key[who] } });
    streams.push(res);
    return res;
  };

  const metric = async (name: string): Promise<number> => {
    const text = await (await fetch(`${t.admin}/metrics`)).text();
    const m = new RegExp(`^${name} (\\d+)`, 'm').exec(text);
    if (m === null) throw new Error(`no ${name} in /metrics`);
    return Number(m[1]);
  };

  const closeAll = async (): Promise<void> => {
    for (const res of streams.splice(0)) await res.body?.cancel().catch(() => {});
    for (const s of sockets.splice(0)) s.destroy();
    await eventually(async () => (await metric('sandgate_api_watchers')) === 0, 5000, 'every watcher to leave');
  };

  beforeAll(async () => {
    const k = await keys();
    key = k.key;
    driver = new TestDriver([snapshot({ namespace: 'team-a', name: 'web', uid: 'a1', sessionModel: 'none' }), snapshot({ namespace: 'team-b', name: 'web', uid: 'b1', sessionModel: 'none' })]);
    t = await startTestGateway([driver], { apiKeys: k.keysFile, keyPepperFile: k.pepperFile, watchMaxPerPrincipal: 3, watchMaxTotal: 5, watchMaxBufferBytes: 64 * 1024 });
  });
  afterAll(async () => {
    for (const res of streams) await res.body?.cancel().catch(() => {});
    for (const s of sockets) s.destroy();
    await t.close();
  });

  it('one team past its bound gets 429 too_many_watches while another team still watches; the total bound holds too', async () => {
    for (let i = 0; i < 3; i++) expect((await watch('team-a')).status).toBe(200);
    const refused = await watch('team-a');
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).not.toBeNull();
    expect(await json(refused)).toMatchObject({ code: 'too_many_watches' });
    const other = await watch('team-b');
    expect(other.status).toBe(200);
    expect((await readEvents(other, 3)).map((e) => e.event)).toEqual(['reset', 'upsert', 'synced']);
    await eventually(async () => (await metric('sandgate_api_watchers')) === 3, 5000, 'the read watcher to leave');
    for (let i = 0; i < 2; i++) expect((await watch('team-b')).status).toBe(200);
    // Five open: the gateway's total is reached, whoever asks.
    const full = await watch('admin');
    expect(full.status).toBe(429);
    expect((await json(full)).message).toContain('on this gateway');
    await closeAll();
    expect((await watch('team-a')).status).toBe(200);
    await closeAll();
  });

  it('each change is serialized once, whatever the number of watchers that see it', async () => {
    const watchers = await Promise.all([watch('team-a', '?namespace=team-a'), watch('team-a', '?namespace=team-a'), watch('admin', '?namespace=team-a'), watch('admin', '?namespace=team-a')]);
    const before = await metric('sandgate_api_watch_changes_serialized_total');
    const pending = watchers.map((res) => readEvents(res, 3 + 10));
    for (let i = 0; i < 10; i++) upsert('team-a', 'web');
    for (const events of await Promise.all(pending)) expect(events.slice(3).map((e) => e.event)).toEqual(Array(10).fill('upsert'));
    expect((await metric('sandgate_api_watch_changes_serialized_total')) - before).toBe(10);
    await closeAll();
  });

  it('a watcher that never reads is dropped once it falls behind the bound; a reading one stays', async () => {
    const open = (who: keyof typeof key): Socket => {
      const socket = connect(Number(new URL(t.admin).port), '127.0.0.1');
      sockets.push(socket);
      socket.on('error', () => {});
      socket.write(`GET /v1/sandboxes/watch?namespace=team-a HTTP/1.1\r\nhost: x\r\nx-api-key: ${key[who]}\r\n\r\n`);
      return socket;
    };
    // The reader reads everything as it comes; the silent one never reads.
    open('admin').resume();
    open('team-a').pause();
    await eventually(async () => (await metric('sandgate_api_watchers')) === 2, 5000, 'both watchers to connect');
    const dropped = await metric('sandgate_api_watchers_dropped_total');
    const pad = 'p'.repeat(4000);
    await eventually(
      async () => {
        // Small bursts (40 kB, under the bound) between turns of the loop: a reader keeps up, the silent one falls behind.
        for (let i = 0; i < 10; i++) upsert('team-a', 'web', pad + i);
        return (await metric('sandgate_api_watchers_dropped_total')) > dropped;
      },
      20_000,
      'the silent watcher to be dropped',
    );
    expect(await metric('sandgate_api_watchers')).toBe(1);
    await closeAll();
  });
});

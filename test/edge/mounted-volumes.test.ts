import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { newApiKey } from '../../src/auth/api-keys.js';
import { FileDriver } from '../../src/drivers/file/file-driver.js';
import { AtomicWriterVolume } from '../helpers/atomic-writer.js';
import { eventually } from '../helpers/eventually.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { ed25519Pem, linkKeysYaml } from '../helpers/link-keys.js';
import { rawRequest, startUpstream } from '../helpers/upstream.js';

/**
 * A gateway whose sandboxes file comes from a ConfigMap volume and whose API keys and link keys come from
 * Secret volumes, each updated exactly as the kubelet's atomic writer does it (a new timestamped
 * directory, `..data` renamed over): every change takes effect without a restart.
 */
describe('files on Kubernetes Secret and ConfigMap volumes are re-read after a ..data swap', () => {
  const PEPPER = 'p'.repeat(32);
  const pepper = new TextEncoder().encode(PEPPER);
  const admin = newApiKey(pepper, 'admin');
  const teamA = newApiKey(pepper, 'team-a');
  const k1 = ed25519Pem();
  const k2 = ed25519Pem();
  let dir: string;
  let up: Awaited<ReturnType<typeof startUpstream>>;
  let t: TestGateway;
  let sandboxes: AtomicWriterVolume;
  let apiKeys: AtomicWriterVolume;
  let linkKeys: AtomicWriterVolume;

  const sandboxesYaml = (names: string[]) => stringify({ sandboxes: names.map((name) => ({ namespace: 'team-a', name, address: '127.0.0.1', supervisor: 'none' })) });
  const keysYaml = (records: object[]) => stringify({ keys: records });
  const host = (name: string) => `${up.port}-${name}.team-a.localhost`;
  const api = (key: string) => fetch(`${t.admin}/v1/sandboxes`, { headers: { 'x-api-key': key } });

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sandgate-volumes-'));
    up = await startUpstream((req, res) => res.writeHead(200, { 'content-type': 'text/plain' }).end(`hello ${req.url}`));
    sandboxes = new AtomicWriterVolume(join(dir, 'sandboxes'), { 'sandboxes.yaml': sandboxesYaml(['web']) });
    apiKeys = new AtomicWriterVolume(join(dir, 'api-keys'), { 'keys.yaml': keysYaml([admin.record, teamA.record]) });
    linkKeys = new AtomicWriterVolume(join(dir, 'link-keys'), { 'links.yaml': linkKeysYaml([{ kid: 'k1', privateKey: k1.privateKey }]) });
    t = await startTestGateway([new FileDriver(sandboxes.path('sandboxes.yaml'))], {
      apiKeys: apiKeys.path('keys.yaml'),
      keyPepper: PEPPER,
      linkKeysFile: linkKeys.path('links.yaml'),
      linkScheme: 'http',
    });
  });
  afterAll(async () => {
    await t?.close();
    await up?.close();
    await rm(dir, { recursive: true, force: true });
  });

  it('ConfigMap: a sandbox added to the sandboxes file is routed', async () => {
    const get = (name: string) => rawRequest(t.gw.proxyPort!, '/', { host: host(name), 'x-api-key': admin.key });
    expect((await get('api')).status).toBe(404);
    sandboxes.update({ 'sandboxes.yaml': sandboxesYaml(['web', 'api']) });
    await eventually(async () => (await get('api')).status === 200, 10_000, 'the added sandbox to be routed');
    expect((await get('web')).body).toBe('hello /');
  });

  it('Secret: an API key removed from the key file is refused (401)', async () => {
    expect((await api(teamA.key)).status).toBe(200);
    apiKeys.update({ 'keys.yaml': keysYaml([admin.record]) });
    await eventually(async () => (await api(teamA.key)).status === 401, 10_000, 'the removed key to be refused');
    expect((await api(admin.key)).status).toBe(200);
  });

  it('Secret: a link key removed from the link keys file revokes the links it signed (403 link_invalid)', async () => {
    const minted = await fetch(`${t.admin}/v1/sandboxes/team-a/web/links`, {
      method: 'POST',
      headers: { 'x-api-key': admin.key, 'content-type': 'application/json' },
      body: JSON.stringify({ port: up.port }),
    });
    expect(minted.status).toBe(201);
    const url = new URL(((await minted.json()) as { url: string }).url);
    const redirect = await rawRequest(t.gw.proxyPort!, url.pathname + url.search, { host: host('web') });
    expect(redirect.status).toBe(303);
    const cookie = redirect.headers['set-cookie']![0]!.split(';')[0]!;
    expect((await rawRequest(t.gw.proxyPort!, '/', { host: host('web'), cookie })).status).toBe(200);

    linkKeys.update({ 'links.yaml': linkKeysYaml([{ kid: 'k2', privateKey: k2.privateKey }]) });
    const refused = await eventually(
      async () => {
        const r = await rawRequest(t.gw.proxyPort!, '/', { host: host('web'), cookie });
        return r.status !== 200 && r;
      },
      10_000,
      'the link signed by the removed key to be refused',
    );
    expect(refused.status).toBe(403);
    expect(refused.headers['x-sandgate-error']).toBe('link_invalid');
    expect((await rawRequest(t.gw.proxyPort!, url.pathname + url.search, { host: host('web') })).status).toBe(403);
  });
});

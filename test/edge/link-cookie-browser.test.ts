import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FileApiKeyStore } from '../../src/auth/api-key-file-store.js';
import { newApiKey } from '../../src/auth/api-keys.js';
import { mintLinkToken } from '../../src/auth/link-tokens.js';
import { CHROMIUM, launchChromium, needsChromium } from '../helpers/chromium.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { ed25519Pem, linkKeySet, writeLinkKeys } from '../helpers/link-keys.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { makeCa, OPENSSL, type TestCa } from '../helpers/tls-certs.js';
import { startUpstream } from '../helpers/upstream.js';

/**
 * Cookie tossing in a real browser: a page of one sandbox (`evil`) tries to plant `sandgate_session`
 * cookies with `Domain=team-a.localhost` — the namespace's domain, which every sandbox host of team-a
 * shares — by its answer's `Set-Cookie` and by its own script, ahead of the user's link cookie for
 * another sandbox (`web`): its own valid link for `evil`, junk, all on longer paths so the browser sends
 * them first. The gateway drops the `Set-Cookie`; the script's cookies reach the gateway and are passed
 * over; the user opens `web` with their own link.
 */

const PEPPER = 'p'.repeat(32);
const PRIVATE = ed25519Pem().privateKey;

describe.skipIf(CHROMIUM === undefined)(needsChromium('cookie tossing between sandbox hosts in Chromium'), () => {
  let dir: string;
  let t: TestGateway;
  let browser: Browser;
  let web: Awaited<ReturnType<typeof startUpstream>>;
  let evil: Awaited<ReturnType<typeof startUpstream>>;
  let adminKey: string;
  let attackersLink: string;
  const webCookies: (string | undefined)[] = [];

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sandgate-cookie-browser-'));
    await writeLinkKeys(join(dir, 'links.yaml'), [{ kid: 'k1', privateKey: PRIVATE }]);
    const admin = newApiKey(new TextEncoder().encode(PEPPER), 'admin');
    await new FileApiKeyStore(join(dir, 'keys.yaml')).add(admin.record);
    adminKey = admin.key;
    web = await startUpstream((req, res) => {
      webCookies.push(req.headers.cookie);
      res.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><title>web</title><h1>the user\'s sandbox</h1>');
    });
    evil = await startUpstream((_req, res) => {
      // What the planting script writes: junk shaped like a link, and the attacker's own valid link.
      const plant = [`x.y.z; path=/app/page`, `${attackersLink}; path=/app`, `a.b.c; path=/app/`, 'junk; path=/'];
      const script = plant.map((p) => `document.cookie = 'sandgate_session=${p}; domain=team-a.localhost';`).join('\n');
      res.setHeader('set-cookie', [`sandgate_session=${attackersLink}; Domain=team-a.localhost; Path=/from-header`, '__Host-sandgate_session=evil; Path=/; Secure', 'evil_own=1; Path=/']);
      res.writeHead(200, { 'content-type': 'text/html' }).end(`<!doctype html><title>evil</title><script>${script}\ndocument.title = 'planted';</script>`);
    });
    const at = { kind: 'address' as const, addresses: ['127.0.0.1'] };
    t = await startTestGateway(
      [new TestDriver([snapshot({ name: 'web', sessionModel: 'none', endpoint: at }), snapshot({ name: 'evil', uid: 'uid-evil', sessionModel: 'none', endpoint: at, ports: [evil.port], publicPorts: [evil.port] })])],
      { linkKeysFile: join(dir, 'links.yaml'), linkScheme: 'http', apiKeys: join(dir, 'keys.yaml'), keyPepper: PEPPER },
    );
    attackersLink = (await mintLinkToken(linkKeySet([{ kid: 'k1', privateKey: PRIVATE }]), { namespace: 'team-a', name: 'evil', uid: 'uid-evil', port: evil.port, team: 'team-a', ttlSeconds: 600 }, 86_400)).token;
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
    await t?.close();
    await web?.close();
    await evil?.close();
    await rm(dir, { recursive: true, force: true });
  });

  const webHost = () => `${web.port}-web.team-a.localhost`;

  it('keeps the user in their own sandbox whatever a sibling sandbox plants', async () => {
    const context = await browser.newContext();
    const page = await context.newPage();
    // The attacker's page (a public port) first: its cookies are older than the user's, and on longer paths.
    expect((await page.goto(`http://${evil.port}-evil.team-a.localhost:${t.gw.proxyPort}/`))?.status()).toBe(200);
    await expect.poll(() => page.title()).toBe('planted');
    const planted = await context.cookies();
    // The answer's Set-Cookie of sandgate's cookie never reached the browser; the sandbox's own one did.
    expect(planted.filter((c) => c.path === '/from-header' || c.name === '__Host-sandgate_session')).toEqual([]);
    expect(planted.map((c) => c.name)).toContain('evil_own');
    // The script's cookies are there, for the whole namespace: the browser sends them to the user's sandbox.
    expect(planted.filter((c) => c.name === 'sandgate_session' && c.domain === '.team-a.localhost').map((c) => c.path).sort()).toEqual(['/', '/app', '/app/', '/app/page']);

    const r = await fetch(`${t.admin}/v1/sandboxes/team-a/web/links`, { method: 'POST', headers: { 'x-api-key': adminKey }, body: JSON.stringify({ port: web.port }) });
    const link = new URL(((await r.json()) as { url: string }).url);
    link.port = String(t.gw.proxyPort);
    link.pathname = '/app/page';
    const opened = await page.goto(link.toString());
    expect(opened?.status()).toBe(200);
    expect(page.url()).toBe(`http://${webHost()}:${t.gw.proxyPort}/app/page`);
    expect(await page.locator('h1').textContent()).toBe('the user\'s sandbox');

    const again = await page.goto(`http://${webHost()}:${t.gw.proxyPort}/app/page`);
    expect(again?.status()).toBe(200);
    // The browser sent the planted cookies before the user's; none of sandgate's reached the sandbox.
    expect(webCookies.at(-1) ?? '').not.toContain('sandgate_session');
    await context.close();
  });
});

describe.skipIf(CHROMIUM === undefined || !OPENSSL)(needsChromium('the __Host- link cookie over TLS in Chromium'), () => {
  const DOMAIN = 'sandboxes.test';
  let dir: string;
  let ca: TestCa;
  let t: TestGateway;
  let browser: Browser;
  let web: Awaited<ReturnType<typeof startUpstream>>;
  let evil: Awaited<ReturnType<typeof startUpstream>>;
  let attackersLink: string;
  const keys = linkKeySet([{ kid: 'k1', privateKey: PRIVATE }]);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sandgate-cookie-browser-tls-'));
    await writeLinkKeys(join(dir, 'links.yaml'), [{ kid: 'k1', privateKey: PRIVATE }]);
    ca = makeCa();
    const leaf = ca.issue('wild', [`*.team-a.${DOMAIN}`]);
    web = await startUpstream((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><title>web</title><h1>the user\'s sandbox</h1>'));
    evil = await startUpstream((_req, res) => {
      // Over TLS the script tries the __Host- name too: a browser refuses a __Host- cookie with a Domain.
      const plant = [`__Host-sandgate_session=${attackersLink}; domain=team-a.${DOMAIN}; path=/; secure`, `sandgate_session=${attackersLink}; domain=team-a.${DOMAIN}; path=/app; secure`];
      res.writeHead(200, { 'content-type': 'text/html' }).end(`<!doctype html><script>${plant.map((c) => `document.cookie = '${c}';`).join('\n')}\ndocument.title = 'planted';</script>`);
    });
    const at = { kind: 'address' as const, addresses: ['127.0.0.1'] };
    t = await startTestGateway(
      [
        new TestDriver([
          snapshot({ name: 'web', sessionModel: 'none', endpoint: at, accessToken: 'traffic-secret' }),
          snapshot({ name: 'evil', uid: 'uid-evil', sessionModel: 'none', endpoint: at, ports: [evil.port], publicPorts: [evil.port] }),
        ]),
      ],
      { baseDomain: DOMAIN, proxyTlsPort: 0, tlsCertFile: leaf.certFile, tlsKeyFile: leaf.keyFile, linkKeysFile: join(dir, 'links.yaml') },
    );
    attackersLink = (await mintLinkToken(keys, { namespace: 'team-a', name: 'evil', uid: 'uid-evil', port: evil.port, team: 'team-a', ttlSeconds: 600 }, 86_400)).token;
    browser = await launchChromium([`--host-resolver-rules=MAP *.${DOMAIN} 127.0.0.1`]);
  });
  afterAll(async () => {
    await browser?.close();
    await t?.close();
    await web?.close();
    await evil?.close();
    ca?.remove();
    await rm(dir, { recursive: true, force: true });
  });

  it('sets __Host-sandgate_session, which a sibling host cannot set, and opens the sandbox with it', async () => {
    const context = await browser.newContext({ ignoreHTTPSErrors: true });
    const page = await context.newPage();
    const origin = (name: string, port: number) => `https://${port}-${name}.team-a.${DOMAIN}:${t.gw.proxyTlsPort}`;
    await page.goto(`${origin('evil', evil.port)}/`);
    await expect.poll(() => page.title()).toBe('planted');
    expect((await context.cookies()).map((c) => [c.name, c.domain, c.path])).toEqual([['sandgate_session', `.team-a.${DOMAIN}`, '/app']]);

    expect((await page.goto(`${origin('web', web.port)}/app/page`))?.status()).toBe(401);
    const { token } = await mintLinkToken(keys, { namespace: 'team-a', name: 'web', uid: 'uid-1', port: web.port, team: 'team-a', ttlSeconds: 600 }, 86_400);
    expect((await page.goto(`${origin('web', web.port)}/app/page?sandgate_token=${token}`))?.status()).toBe(200);
    expect(page.url()).toBe(`${origin('web', web.port)}/app/page`);
    expect(await page.locator('h1').textContent()).toBe('the user\'s sandbox');
    const mine = (await context.cookies()).find((c) => c.name === '__Host-sandgate_session');
    expect(mine).toMatchObject({ domain: `${web.port}-web.team-a.${DOMAIN}`, path: '/', secure: true, httpOnly: true, value: token });
    await context.close();
  });
});

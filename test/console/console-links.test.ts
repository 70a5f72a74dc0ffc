import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FileApiKeyStore } from '../../src/auth/api-key-file-store.js';
import { newApiKey } from '../../src/auth/api-keys.js';
import { CHROMIUM, launchChromium, needsChromium } from '../helpers/chromium.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { ed25519Pem, writeLinkKeys } from '../helpers/link-keys.js';
import { freePort } from '../helpers/redis-server.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { startUpstream } from '../helpers/upstream.js';

/**
 * The console's "open in browser" action in a real Chromium: the detail of a sandbox mints a link through
 * `POST /v1/sandboxes/{ns}/{name}/links` with the console's key and opens it in a new tab, which lands on
 * the sandbox's page (through the embedded proxy, the token traded for the cookie). A team key's console
 * cannot mint for another namespace: the API refuses, and the console shows the typed error.
 */

const PEPPER = 'console-links-pepper-0123456789abcdef';

describe.skipIf(CHROMIUM === undefined)(needsChromium('the console opens a sandbox in a browser'), () => {
  let dir: string;
  let gw: TestGateway;
  let browser: Browser;
  let app: Awaited<ReturnType<typeof startUpstream>>;
  let proxyPort: number;
  let teamKey: string;
  const seen: string[] = [];

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sandgate-console-links-'));
    await writeLinkKeys(join(dir, 'links.yaml'), [{ kid: 'k1', privateKey: ed25519Pem().privateKey }]);
    await writeFile(join(dir, 'pepper'), PEPPER);
    const team = newApiKey(new TextEncoder().encode(PEPPER), 'team-a');
    await new FileApiKeyStore(join(dir, 'keys.yaml')).add(team.record);
    teamKey = team.key;
    app = await startUpstream((req, res) => {
      seen.push(req.url ?? '');
      res.writeHead(200, { 'content-type': 'text/html' }).end('<!doctype html><title>sandbox app</title><h1>sandbox app</h1>');
    });
    // The minted URL names the proxy's port, so the proxy listens on one chosen before the gateway starts.
    proxyPort = await freePort();
    const at = { kind: 'address' as const, addresses: ['127.0.0.1'] };
    gw = await startTestGateway(
      [
        new TestDriver([
          snapshot({ namespace: 'team-a', name: 'web', uid: 'a1', sessionModel: 'none', endpoint: at, ports: [app.port] }),
          snapshot({ namespace: 'team-b', name: 'web', uid: 'b1', sessionModel: 'none', endpoint: at, ports: [app.port] }),
        ]),
      ],
      { apiKeys: join(dir, 'keys.yaml'), keyPepperFile: join(dir, 'pepper'), linkKeysFile: join(dir, 'links.yaml'), linkScheme: 'http', linkPort: proxyPort, proxyPort },
    );
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
    await gw?.close();
    await app?.close();
    await rm(dir, { recursive: true, force: true });
  });

  async function consoleWithKey(key: string): Promise<Page> {
    const page = await browser.newPage({ viewport: { width: 1400, height: 800 } });
    await page.goto(`${gw.admin}/console`);
    await page.waitForSelector('#key-form:not([hidden])');
    await page.fill('#key-input', key);
    await page.press('#key-input', 'Enter');
    await page.waitForSelector('body[data-synced="true"]');
    return page;
  }

  it('mints a link for the open sandbox and opens its page in a new tab, without the token or an opener', async () => {
    const page = await consoleWithKey(teamKey);
    await page.focus('#table-viewport');
    await page.keyboard.press('Home');
    await page.keyboard.press('Enter');
    await expect.poll(() => page.locator('#detail h2').textContent()).toContain('team-a/web');
    // The port defaults to the sandbox's first allowed port.
    expect(await page.inputValue('#detail form.open-link input[name="port"]')).toBe(String(app.port));
    seen.length = 0;
    const [tab] = await Promise.all([page.context().waitForEvent('page'), page.click('#detail form.open-link button[type="submit"]')]);
    await tab.waitForLoadState();
    await expect.poll(() => tab.url()).toBe(`http://${app.port}-web.team-a.localhost:${proxyPort}/`);
    expect(await tab.locator('h1').textContent()).toBe('sandbox app');
    expect(await tab.evaluate(() => (globalThis as { opener?: unknown }).opener)).toBeNull();
    // The sandbox got the page (and the browser's favicon request), never the token.
    expect(seen[0]).toBe('/');
    expect(seen.filter((u) => u.includes('sandgate_token'))).toEqual([]);
    await expect.poll(() => page.locator('#detail .link-status').textContent()).toMatch(/^Opened in a new tab; the link expires at /);
    await tab.close();
    await page.close();
  });

  it("a team key's console cannot mint for another namespace: the API's typed refusal is shown, no tab opens", async () => {
    const page = await consoleWithKey(teamKey);
    expect(await page.locator('.row[data-key="team-b/web"]').count()).toBe(0);
    // The console's own form, made for a sandbox of another namespace (what a user could do from devtools).
    // A string, not a function: vitest would rewrite a function's import() for Node.
    await page.evaluate(`(async () => {
      const { openLinkForm } = await import('/console/assets/open-link.js');
      const header = document.querySelector('meta[name="sandgate-api-key-header"]').content;
      const key = sessionStorage.getItem('sandgate-api-key');
      const form = openLinkForm({ namespace: 'team-b', name: 'web', ports: [3000] }, () => ({ [header]: key }));
      form.id = 'foreign';
      document.body.append(form);
    })()`);
    let tabs = 0;
    page.context().on('page', () => tabs++);
    seen.length = 0;
    await page.click('#foreign button[type="submit"]');
    await expect.poll(() => page.locator('#foreign .link-status').textContent()).toBe('sandbox_not_found: No sandbox team-b/web');
    expect(await page.getAttribute('#foreign .link-status', 'role')).toBe('alert');
    expect(tabs).toBe(0);
    expect(seen).toEqual([]);
    await page.close();
  });
});

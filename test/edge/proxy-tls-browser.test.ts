import { chromium, type Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebSocketServer } from 'ws';
import { CHROMIUM, needsChromium } from '../helpers/chromium.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { startUpstream } from '../helpers/upstream.js';
import { makeCa, needsOpenssl, OPENSSL, type TestCa } from '../helpers/tls-certs.js';

/** Chromium loads a sandbox's page over HTTPS through the proxy's TLS port, which it reaches over HTTP/2, and opens a WebSocket from it. */

const DOMAIN = 'sandboxes.test';
const PAGE = `<!doctype html><html><body><script>
const ws = new WebSocket('wss://' + location.host + '/ws');
ws.onmessage = (e) => { if (e.data === 'echo ping') document.title = 'ws ok'; };
ws.onopen = () => ws.send('ping');
ws.onerror = () => (document.title = 'ws failed');
</script></body></html>`;

describe.skipIf(CHROMIUM === undefined || !OPENSSL)(OPENSSL ? needsChromium('Chromium over the TLS port') : needsOpenssl('Chromium over the TLS port'), () => {
  let ca: TestCa;
  let t: TestGateway;
  let up: Awaited<ReturnType<typeof startUpstream>>;
  let wss: WebSocketServer;
  let browser: Browser;
  const upgrades: string[][] = [];

  beforeAll(async () => {
    ca = makeCa();
    const leaf = ca.issue('wild', [`*.team-a.${DOMAIN}`]);
    up = await startUpstream((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end(PAGE);
    });
    wss = new WebSocketServer({ server: up.server });
    wss.on('connection', (ws, req) => {
      upgrades.push(req.rawHeaders);
      ws.on('message', (m) => ws.send(`echo ${String(m)}`));
    });
    t = await startTestGateway([new TestDriver([snapshot({ name: 'web', sessionModel: 'none', endpoint: { kind: 'address', addresses: ['127.0.0.1'] } })])], {
      baseDomain: DOMAIN,
      proxyTlsPort: 0,
      tlsCertFile: leaf.certFile,
      tlsKeyFile: leaf.keyFile,
    });
    browser = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-dev-shm-usage', `--host-resolver-rules=MAP *.${DOMAIN} 127.0.0.1`],
    });
  });
  afterAll(async () => {
    await browser?.close();
    await t?.close();
    wss?.close();
    await up?.close();
    ca?.remove();
  });

  it('loads the page over h2 and its WebSocket (extended CONNECT on the same connection) echoes', async () => {
    const context = await browser.newContext({ ignoreHTTPSErrors: true });
    const page = await context.newPage();
    try {
      await page.goto(`https://${up.port}-web.team-a.${DOMAIN}:${t.gw.proxyTlsPort}/`);
      expect(await page.evaluate(() => (globalThis as any).performance.getEntriesByType('navigation')[0].nextHopProtocol)).toBe('h2');
      await expect.poll(() => page.title()).toBe('ws ok');
      expect(upgrades).toHaveLength(1);
      // The handshake the proxy writes for an RFC 8441 stream (its own key, after X-Forwarded-*): Chromium
      // opened the WebSocket on the h2 connection, not on a new HTTP/1.1 one, whose key would come first.
      expect(upgrades[0]!.slice(-6)).toEqual(['Connection', 'Upgrade', 'Upgrade', 'websocket', 'Sec-WebSocket-Key', expect.any(String)]);
      expect(upgrades[0]).toContain('permessage-deflate; client_max_window_bits');
    } finally {
      await context.close();
    }
  });
});

import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newApiKey } from '../../src/auth/api-keys.js';
import { DEMO_SANDBOXES } from '../../src/demo/demo.js';
import { FileDriver } from '../../src/drivers/file/file-driver.js';
import { mintSupervisorToken, type SupervisorKeys } from '../../src/sessions/supervisor-token.js';
import { CHROMIUM, launchChromium, needsChromium, outputDir } from '../helpers/chromium.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';

/**
 * The operator console in a real headless Chromium: a gateway serving the demo sandboxes, a reference
 * supervisor in its own process for team-a/notebook, API keys for the admin team and for team-a.
 */

const CLI = fileURLToPath(new URL('../../dist/src/cli/main.js', import.meta.url));
/** Short heartbeats so a lost supervisor is noticed within a test's patience: 3 intervals = 3 s. */
const HEARTBEAT_MS = 1000;
const DEMO = [
  ['team-a/web', 'Ready'],
  ['team-a/notebook', 'Ready'],
  ['team-b/agent', 'Ready'],
  ['team-b/sleepy', 'Paused'],
] as const;

let gw: TestGateway;
let browser: Browser;
let adminKey: string;
let teamKey: string;
const supervisorKeys: SupervisorKeys = { keys: [{ kid: 'test', secret: randomBytes(32) }], audience: 'sandgate-supervisor' };
const supervisors: ChildProcess[] = [];

/** Starts `sandgate supervisor` for team-a/notebook; resolves once the gateway shows it Ready. */
async function startSupervisor(): Promise<ChildProcess> {
  const token = await mintSupervisorToken(supervisorKeys, 'team-a', 'notebook', 3600);
  const proc = spawn(process.execPath, [CLI, 'supervisor', '--gateway', `ws://127.0.0.1:${gw.gw.supervisorPort!}`, '--token', token], { stdio: 'ignore' });
  supervisors.push(proc);
  await new Promise<void>((resolve) => {
    const off = gw.gw.view.onChange((key, entry) => {
      if (key === 'team-a/notebook' && entry?.status.phase === 'Ready') {
        off();
        resolve();
      }
    });
    if (gw.gw.view.get('team-a', 'notebook')?.status.phase === 'Ready') {
      off();
      resolve();
    }
  });
  return proc;
}

function killed(proc: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    proc.once('exit', () => resolve());
    proc.kill('SIGKILL');
  });
}

const row = (key: string) => `.row[data-key="${key}"]:not([hidden])`;

/** Waits until the phase badge in `key`'s row reads `phase` (Playwright's default bound only guards a hang). */
function rowPhase(page: Page, key: string, phase: string): Promise<void> {
  return page.locator(`${row(key)} .phase`, { hasText: new RegExp(`^${phase}$`) }).waitFor();
}

async function phaseOf(page: Page, key: string): Promise<string | null> {
  return page.locator(`${row(key)} .phase`).textContent();
}

/** Opens the console at `base`, gives it `key` through the key form, and waits for the full state. */
async function openConsole(base: string, key: string | undefined): Promise<Page> {
  const page = await browser.newPage({ viewport: { width: 1400, height: 800 } });
  await page.goto(`${base}/console`);
  await page.waitForSelector('#key-form:not([hidden])');
  if (key !== undefined) {
    await page.fill('#key-input', key);
    await page.press('#key-input', 'Enter');
    await page.waitForSelector('body[data-synced="true"]');
  }
  return page;
}

describe.skipIf(CHROMIUM === undefined)(needsChromium('the console in Chromium'), () => {
  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sandgate-console-'));
    const pepper = randomBytes(32).toString('base64');
    const admin = newApiKey(new TextEncoder().encode(pepper), 'admin');
    const team = newApiKey(new TextEncoder().encode(pepper), 'team-a');
    adminKey = admin.key;
    teamKey = team.key;
    writeFileSync(join(dir, 'keys.yaml'), `keys:\n${[admin.record, team.record].map((r) => `  - ${JSON.stringify(r)}\n`).join('')}`);
    writeFileSync(join(dir, 'pepper'), pepper);
    gw = await startTestGateway([new FileDriver(DEMO_SANDBOXES)], { apiKeys: join(dir, 'keys.yaml'), keyPepperFile: join(dir, 'pepper'), heartbeatIntervalMs: HEARTBEAT_MS }, { supervisorKeys });
    browser = await launchChromium();
  });

  afterAll(async () => {
    await browser?.close();
    for (const p of supervisors) p.kill('SIGKILL');
    await gw?.close();
  });

  it("admin key: every demo sandbox's phase in the table; killing the supervisor turns team-a/notebook not-Ready without a reload", async () => {
    const supervisor = await startSupervisor();
    const page = await openConsole(gw.admin, adminKey);
    let navigations = 0;
    page.on('framenavigated', () => navigations++);
    for (const [key, phase] of DEMO) expect(await phaseOf(page, key)).toBe(phase);
    expect(await page.locator(`${row('team-a/notebook')} [role="gridcell"]`).nth(6).textContent()).toMatch(/^gw-test · /);

    // Keyboard: the grid is one tab stop; arrows select, Enter opens the detail with the rule in words.
    await page.focus('#table-viewport');
    await page.keyboard.press('Home');
    await page.keyboard.press('Enter');
    await expect.poll(() => page.locator('#detail h2').textContent()).toContain('team-a/notebook');
    expect(await page.locator('#detail').textContent()).toContain('a supervisor session is live in the cluster');
    await page.screenshot({ path: join(outputDir('console-browser'), 'admin-ready.png') });

    await page.evaluate(() => ((globalThis as any).marker = 'still the same page'));
    await killed(supervisor);
    await rowPhase(page, 'team-a/notebook', 'Provisioning');
    expect(await page.evaluate(() => (globalThis as any).marker)).toBe('still the same page');
    expect(navigations).toBe(0);
    expect(await page.locator(`${row('team-a/notebook')} [role="gridcell"]`).nth(4).textContent()).toBe('SupervisorNotConnected');
    // The open detail followed the change: the new rule, and the phase change it saw.
    await expect.poll(() => page.locator('#detail').textContent()).toContain('no supervisor session is live');
    expect(await page.locator('#detail ol').textContent()).toMatch(/Ready.*Provisioning/s);
    await page.keyboard.press('Escape');
    expect(await page.locator('#detail').isHidden()).toBe(true);
    await page.screenshot({ path: join(outputDir('console-browser'), 'admin-supervisor-lost.png') });
    await page.close();
  });

  it('a team key sees only its namespace: table, counts, static table and gateways view', async () => {
    const page = await openConsole(gw.admin, teamKey);
    const keys = await page.locator('.row[data-key]:not([hidden])').evaluateAll((els) => els.map((e) => e.getAttribute('data-key')));
    expect(keys.sort()).toEqual(['team-a/notebook', 'team-a/web']);
    expect(await page.locator('#shown').textContent()).toContain('2 of 2 shown');
    await page.screenshot({ path: join(outputDir('console-browser'), 'team-a.png') });
    const table = await page.evaluate(async (key) => (await fetch('/console/table', { headers: { 'x-api-key': key } })).text(), teamKey);
    expect(table).toContain('notebook');
    expect(table).not.toContain('team-b');
    await page.click('#tab-gateways');
    await expect.poll(() => page.locator('#gateways-body').textContent()).toContain('gw-test (this gateway)');
    expect(await page.locator('#presence-state').textContent()).toContain('in memory');
    await page.close();
  });

  it('no key: the page asks for one and shows nothing; a wrong key is refused with the reason', async () => {
    const page = await openConsole(gw.admin, undefined);
    expect(await page.locator('.row[data-key]').count()).toBe(0);
    await page.fill('#key-input', 'sgk_not-a-key');
    await page.press('#key-input', 'Enter');
    await expect.poll(() => page.locator('#key-error').textContent()).toBe('The API key is unknown or revoked');
    expect(await page.locator('.row[data-key]').count()).toBe(0);
    await page.close();
  });

  it('a dropped watch resumes with Last-Event-ID and shows what changed meanwhile, without a reload', async () => {
    // The page reaches the gateway through a TCP relay the test can cut, recording each request head.
    const heads: string[] = [];
    const sockets = new Set<Socket>();
    let cut = false;
    const relay: Server = createServer((client) => {
      if (cut) return void client.destroy();
      const upstream = connect(gw.gw.adminPort, '127.0.0.1');
      for (const s of [client, upstream]) {
        sockets.add(s);
        s.on('close', () => sockets.delete(s));
        s.on('error', () => undefined);
      }
      client.on('data', (d: Buffer) => heads.push(d.toString('latin1')));
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((resolve) => relay.listen(0, '127.0.0.1', resolve));
    const base = `http://127.0.0.1:${(relay.address() as { port: number }).port}`;
    const watches = () => heads.filter((h) => h.startsWith('GET /v1/sandboxes/watch'));
    try {
      const supervisor = await startSupervisor();
      const page = await openConsole(base, adminKey);
      await rowPhase(page, 'team-a/notebook', 'Ready');
      let navigations = 0;
      page.on('framenavigated', () => navigations++);
      const before = watches().length;
      cut = true;
      for (const s of sockets) s.destroy();
      await page.waitForSelector('#connection.down');
      // The change happens while the page is disconnected.
      const changed = new Promise<void>((resolve) => {
        const off = gw.gw.view.onChange((key, entry) => {
          if (key === 'team-a/notebook' && entry?.status.phase !== 'Ready') {
            off();
            resolve();
          }
        });
      });
      await killed(supervisor);
      await changed;
      cut = false;
      await rowPhase(page, 'team-a/notebook', 'Provisioning');
      const resumed = watches().slice(before);
      expect(resumed.length).toBeGreaterThanOrEqual(1);
      expect(resumed.at(-1)!.toLowerCase()).toMatch(/\r\nlast-event-id: \d+\r\n/);
      await page.waitForSelector('#connection.live');
      expect(navigations).toBe(0);
      await page.close();
    } finally {
      relay.close();
      for (const s of sockets) s.destroy();
    }
  });
});

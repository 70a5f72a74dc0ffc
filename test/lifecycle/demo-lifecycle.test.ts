import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { DEMO_SANDBOXES } from '../../src/demo/demo.js';
import { FileDriver, parseSandboxesFile } from '../../src/drivers/file/file-driver.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { eventually } from '../helpers/eventually.js';

/**
 * The demo's idle sandbox (`npm start`: team-b/napper, idleTimeout 30s, resume on-traffic) through the
 * file driver of the demo's own file: 30 s without traffic pauses it — in the driver's state, the file
 * untouched — and the next request wakes it. The clock is the test's. Its upstream is the demo's to
 * start (the CLI test does), so the woken request here ends at the closed port.
 */

const cleanup: (() => Promise<unknown> | void)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

function get(t: TestGateway, host: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    request({ host: '127.0.0.1', port: t.gw.proxyPort, path: '/', headers: { host } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode!, body }));
    })
      .on('error', reject)
      .end();
  });
}

describe('the demo sandbox with a 30 s idle timeout', () => {
  it('is declared in examples/demo-sandboxes.yaml', () => {
    const napper = parseSandboxesFile(readFileSync(DEMO_SANDBOXES, 'utf8')).find((s) => s.name === 'napper');
    expect(napper).toMatchObject({ namespace: 'team-b', idleTimeoutMs: 30_000, resumeOnTraffic: true, state: 'ready' });
  });

  it('pauses after 30 s without traffic and wakes on the next request; the file is not written', async () => {
    const before = readFileSync(DEMO_SANDBOXES, 'utf8');
    const clock = { t: Date.parse('2026-04-01T00:00:00Z') };
    const t = await startTestGateway([new FileDriver(DEMO_SANDBOXES)], { upstreamConnectRetryMs: 0, activityReportIntervalMs: 600_000 }, { now: () => clock.t });
    cleanup.push(() => t.close());
    const phase = (): string | undefined => t.gw.view.get('team-b', 'napper')?.status.phase;
    expect(phase()).toBe('Ready');
    clock.t += 29_000;
    await t.gw.lifecycle.idle.check();
    expect(phase()).toBe('Ready');
    clock.t += 2_000;
    await t.gw.lifecycle.idle.check();
    expect(phase()).toBe('Paused');
    // Woken by the next request: Ready again, the request carried on to the sandbox's port.
    const res = await get(t, '8000-napper.team-b.localhost');
    expect(JSON.parse(res.body).code).toBe('port_not_open');
    await eventually(() => phase() === 'Ready', 5000, 'napper Ready again');
    expect(readFileSync(DEMO_SANDBOXES, 'utf8')).toBe(before);
    const api = (await (await fetch(`${t.admin}/v1/sandboxes/team-b/napper`)).json()) as { idle: { decision: { decision: string } } };
    expect(api.idle.decision.decision).toBe('paused');
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startE2bWorld, type E2bWorld, type Mode, type Path } from './harness.js';

/**
 * The one deliberately long test of the suite (about 60 s): a command that prints nothing for 60 s,
 * as `commands.run` streams it — envd's keepalive events (the SDK asks for one every 50 s) are all that
 * crosses the connection. The gateways here close a silent stream after 57 s (`--proxy-idle-timeout-ms`),
 * so the command only survives if the pings travel end to end through the proxy and the relay. All four
 * paths run at once, in their own file so the rest of the suite runs beside it.
 */

const IDLE_TIMEOUT_MS = 57_000;

describe('a 60 s silent command with keepalive pings', () => {
  const worlds: Partial<Record<Path, E2bWorld>> = {};
  beforeAll(async () => {
    [worlds.proxy, worlds.relay] = await Promise.all([startE2bWorld('proxy', { proxyIdleTimeoutMs: IDLE_TIMEOUT_MS }), startE2bWorld('relay', { proxyIdleTimeoutMs: IDLE_TIMEOUT_MS })]);
  });
  afterAll(async () => {
    await Promise.all(Object.values(worlds).map((w) => w.close()));
  });

  it('survives in sandbox-URL and host mode, through the proxy and the relay (long by design: 60 s)', async () => {
    const runs: Promise<unknown>[] = [];
    for (const path of ['proxy', 'relay'] as const) {
      for (const mode of ['sandbox-url', 'host'] as const satisfies readonly Mode[]) {
        const w = worlds[path]!;
        const key = `${mode}-long`;
        runs.push(
          (async () => {
            await w.sdk[mode].call('connect', { key, id: 'sbx-live' });
            const r = await w.sdk[mode].call('run', { key, runId: key, cmd: 'sleep 60; echo done', timeoutMs: 120_000 });
            return { path, mode, ...r };
          })(),
        );
      }
    }
    const results = await Promise.all(runs);
    for (const r of results) expect(r).toMatchObject({ exitCode: 0, stdout: 'done\n' });
    // Two commands per stand-in, each pinged at least once before it printed anything.
    for (const w of Object.values(worlds)) expect(w.envd.keepalives).toBeGreaterThanOrEqual(2);
  }, 120_000);
});

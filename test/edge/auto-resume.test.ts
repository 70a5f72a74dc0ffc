import { afterEach, describe, expect, it } from 'vitest';
import { cond, snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { eventually } from '../helpers/eventually.js';
import { authzClient, check, envoyCheckRequest, startTestGateway, type TestGateway } from '../helpers/gateway.js';

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

const paused = (over = {}) =>
  snapshot({ name: 'sleepy', sessionModel: 'none', state: 'paused', conditions: [cond('Ready', 'False', 'SandboxPaused')], endpoint: { kind: 'address', addresses: ['127.0.0.7'] }, ...over });

async function setup(over: Record<string, unknown>, sandbox = paused({ resumeOnTraffic: true })): Promise<{ t: TestGateway; driver: TestDriver; client: ReturnType<typeof authzClient> }> {
  const driver = new TestDriver([sandbox]);
  const t = await startTestGateway([driver], { readinessWaitMs: 5000, waitersPerSandbox: 2000, ...over });
  const client = authzClient(t.grpcTarget);
  cleanup.push(() => t.close(), () => client.close());
  return { t, driver, client };
}

describe('auto-resume on traffic', () => {
  it('a storm of 1,000 concurrent requests to a paused sandbox makes exactly one resume call; all are served once Ready', async () => {
    // Room for the whole storm on the one HTTP/2 connection, so all of it reaches the gateway at once.
    const { t, driver, client } = await setup({ grpcMaxConcurrentStreams: 1000 });
    // The resume call returns; the backend reports the sandbox running only once every request waits.
    driver.onResume = async () => undefined;
    const storm = Promise.all(Array.from({ length: 1000 }, () => check(client, envoyCheckRequest({ host: '8000-sleepy.team-a.localhost' }), 20_000)));
    await eventually(() => t.gw.view.waiters.size === 1000, 20_000, () => `all 1,000 requests to wait; ${t.gw.view.waiters.size} do`);
    expect(driver.resumed).toEqual(['team-a/sleepy']);
    driver.upsert(paused({ resourceVersion: '2', state: 'ready', conditions: [cond('Ready', 'True')], resumeOnTraffic: true }));
    const answers = await storm;
    expect(driver.resumed).toEqual(['team-a/sleepy']);
    expect(answers.every((a) => a.http_response === 'ok_response')).toBe(true);
  });

  it('a failed resume answers 503 sandbox_resume_failed with the driver reason, at once', async () => {
    const { driver, client } = await setup({});
    driver.onResume = async () => {
      throw new Error('quota exceeded in zone a');
    };
    const res = await check(client, envoyCheckRequest({ host: '8000-sleepy.team-a.localhost' }));
    expect(res.denied_response.status.code).toBe('ServiceUnavailable');
    const body = JSON.parse(res.denied_response.body);
    expect(body.code).toBe('sandbox_resume_failed');
    expect(body.message).toContain('quota exceeded in zone a');
  });

  it('a resume that does not finish within the readiness wait answers 503 sandbox_not_ready with Retry-After: the wake goes on', async () => {
    const { driver, client } = await setup({ readinessWaitMs: 300 });
    driver.onResume = () => new Promise(() => undefined);
    const res = await check(client, envoyCheckRequest({ host: '8000-sleepy.team-a.localhost' }));
    expect(res.denied_response.status.code).toBe('ServiceUnavailable');
    expect(JSON.parse(res.denied_response.body)).toMatchObject({ code: 'sandbox_not_ready', phase: 'Paused' });
    expect(res.denied_response.headers.map((h: { header: { key: string; value: string } }) => [h.header.key, h.header.value])).toContainEqual(['retry-after', '2']);
    // A browser navigation through Envoy gets the page that reloads itself.
    const page = await check(client, envoyCheckRequest({ host: '8000-sleepy.team-a.localhost', headers: { 'sec-fetch-mode': 'navigate' } }));
    expect(page.denied_response.body).toContain('<meta http-equiv="refresh" content="2">');
    expect(driver.resumed).toEqual(['team-a/sleepy']);
  });

  it('without a resume policy a paused sandbox answers 409 sandbox_paused and no resume is made', async () => {
    const { driver, client } = await setup({}, paused());
    const res = await check(client, envoyCheckRequest({ host: '8000-sleepy.team-a.localhost' }));
    expect(JSON.parse(res.denied_response.body).code).toBe('sandbox_paused');
    expect(driver.resumed).toEqual([]);
  });

  it('--auto-resume applies to sandboxes without a policy of their own; a sandbox can opt out', async () => {
    const { driver, client } = await setup({ autoResume: true }, paused());
    driver.onResume = async () => driver.upsert(paused({ resourceVersion: '2', state: 'ready', conditions: [cond('Ready', 'True')] }));
    expect((await check(client, envoyCheckRequest({ host: '8000-sleepy.team-a.localhost' }))).http_response).toBe('ok_response');
    const other = await setup({ autoResume: true }, paused({ resumeOnTraffic: false }));
    const res = await check(other.client, envoyCheckRequest({ host: '8000-sleepy.team-a.localhost' }));
    expect(JSON.parse(res.denied_response.body).code).toBe('sandbox_paused');
    expect(other.driver.resumed).toEqual([]);
  });

  it('resume requires the same authorization as the request: an unauthorized caller triggers nothing', async () => {
    const { driver, client } = await setup({}, paused({ resumeOnTraffic: true, accessToken: 'the-token' }));
    const res = await check(client, envoyCheckRequest({ host: '8000-sleepy.team-a.localhost' }));
    expect(JSON.parse(res.denied_response.body).code).toBe('token_required');
    expect(driver.resumed).toEqual([]);
  });
});

import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rawRequest } from '../helpers/upstream.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { authzClient, check, envoyCheckRequest, startTestGateway, type TestGateway } from '../helpers/gateway.js';

function get(port: number, path: string, host: string): ReturnType<typeof rawRequest> {
  return rawRequest(port, path, { host });
}

/**
 * A readiness wait that fails (a bug, injected here by making the view's waiters throw) is answered at
 * every door like any other denial: internal_error, 500 — for ext_authz a PERMISSION_DENIED answer with a
 * denied_response, never a bare gRPC INTERNAL that leaves Envoy to its failure mode.
 */
describe('a failed readiness wait is an internal_error denial at every door', () => {
  let t: TestGateway;
  let client: ReturnType<typeof authzClient>;
  beforeAll(async () => {
    t = await startTestGateway([new TestDriver([snapshot({ name: 'notebook', endpoint: { kind: 'address', addresses: ['127.0.0.3'] } })])], { readinessWaitMs: 2000 });
    t.gw.view.waiters.wait = () => Promise.reject(new Error('injected waiter failure'));
    client = authzClient(t.grpcTarget);
  });
  afterAll(async () => {
    client.close();
    await t.close();
  });

  it('ext_authz: PERMISSION_DENIED with the code as message and a 500 internal_error denied_response', async () => {
    const res = await check(client, envoyCheckRequest({ host: '8000-notebook.team-a.localhost' }));
    expect(res.status).toMatchObject({ code: 7, message: 'internal_error' });
    expect(res.denied_response.status.code).toBe('InternalServerError');
    expect(JSON.parse(res.denied_response.body).code).toBe('internal_error');
  });

  it('HTTP authz and the embedded proxy: 500 internal_error', async () => {
    for (const [port, path] of [[t.gw.adminPort, '/authz/'], [t.gw.proxyPort!, '/']] as const) {
      const res = await get(port, path, '8000-notebook.team-a.localhost');
      expect([res.status, JSON.parse(res.body).code], path).toEqual([500, 'internal_error']);
    }
  });

  it('logs the cause at error', () => {
    expect(t.logs.lines.some((l) => l.msg === 'readiness wait failed' && l.level === 50)).toBe(true);
  });
});

import { credentials, makeGenericClientConstructor } from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../helpers/eventually.js';
import { cond, presence, snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { authzClient, check, envoyCheckRequest, json, startTestGateway, type TestGateway } from '../helpers/gateway.js';

function headerOf(options: { header: { key: string; value: string }; append_action?: string }[], key: string) {
  return options.find((o) => o.header.key === key);
}

describe('Envoy ext_authz v3 Check', () => {
  let t: TestGateway;
  let driver: TestDriver;
  let client: ReturnType<typeof authzClient>;

  beforeAll(async () => {
    driver = new TestDriver([
      snapshot({ name: 'web', sessionModel: 'none', ids: ['sbx-123'], endpoint: { kind: 'address', addresses: ['127.0.0.2'] }, ports: [8000, 49983] }),
      snapshot({ name: 'notebook', uid: 'u2', endpoint: { kind: 'address', addresses: ['127.0.0.3'] } }),
      snapshot({ name: 'sleepy', uid: 'u3', state: 'paused' }),
    ]);
    t = await startTestGateway([driver], { readinessWaitMs: 2000, pathPrefix: 'sbx' });
    client = authzClient(t.grpcTarget);
  });
  afterAll(async () => {
    client.close();
    await t.close();
  });

  it('allows a host-routed request: sets the upstream header with OVERWRITE_IF_EXISTS_OR_ADD and dynamic metadata', async () => {
    const res = await check(client, envoyCheckRequest({ host: '8000-web.team-a.localhost', path: '/index.html' }));
    expect(res.status.code ?? 0).toBe(0);
    expect(res.http_response).toBe('ok_response');
    const up = headerOf(res.ok_response.headers, 'x-sandgate-upstream');
    expect(up?.header.value).toBe('127.0.0.2:8000');
    expect(up?.append_action).toBe('OVERWRITE_IF_EXISTS_OR_ADD');
    expect(res.dynamic_metadata.fields.upstream.stringValue).toBe('127.0.0.2:8000');
  });

  it('a client-sent upstream header never decides the upstream; routing headers are removed', async () => {
    const res = await check(
      client,
      envoyCheckRequest({ host: 'gateway.example.com', headers: { 'x-sandgate-upstream': '169.254.169.254:80', 'x-sandbox-namespace': 'team-a', 'x-sandbox-id': 'web', 'x-sandbox-port': '49983' } }),
    );
    expect(headerOf(res.ok_response.headers, 'x-sandgate-upstream')?.header.value).toBe('127.0.0.2:49983');
    expect(res.ok_response.headers_to_remove.sort()).toEqual(['x-sandbox-id', 'x-sandbox-namespace', 'x-sandbox-port']);
  });

  it('routes E2B headers through the id index', async () => {
    const res = await check(client, envoyCheckRequest({ host: 'api.e2b.dev', headers: { 'e2b-sandbox-id': 'sbx-123', 'e2b-sandbox-port': '49983' } }));
    expect(headerOf(res.ok_response.headers, 'x-sandgate-upstream')?.header.value).toBe('127.0.0.2:49983');
    expect(res.ok_response.headers_to_remove.sort()).toEqual(['e2b-sandbox-id', 'e2b-sandbox-port']);
  });

  it('rewrites the path for path routes', async () => {
    const res = await check(client, envoyCheckRequest({ host: 'gw.example.com', path: '/sbx/team-a/web/8000/api?q=1' }));
    expect(headerOf(res.ok_response.headers, ':path')?.header.value).toBe('/api?q=1');
  });

  it('accepts mixed-case header names and rejects conflicting duplicates', async () => {
    const ok = await check(client, envoyCheckRequest({ host: 'x.example.com', headers: { 'X-Sandbox-Namespace': 'team-a', 'X-Sandbox-Id': 'web', 'X-Sandbox-Port': '8000' } }));
    expect(ok.http_response).toBe('ok_response');
    const bad = await check(client, envoyCheckRequest({ host: 'x.example.com', headers: { 'X-Sandbox-Id': 'web', 'x-sandbox-id': 'notebook', 'x-sandbox-namespace': 'team-a' } }));
    expect(bad.denied_response.status.code).toBe('BadRequest');
  });

  it.each([
    ['unknown sandbox', { host: '8000-nope.team-a.localhost' }, 'NotFound', 'sandbox_not_found'],
    ['port not allowed', { host: '22-web.team-a.localhost' }, 'Forbidden', 'port_not_allowed'],
    ['paused', { host: '8000-sleepy.team-a.localhost' }, 'Conflict', 'sandbox_paused'],
    ['invalid port', { host: '0-web.team-a.localhost' }, 'BadRequest', 'invalid_route'],
    ['no route', { host: 'localhost' }, 'BadRequest', 'invalid_route'],
  ])('denies %s with a typed JSON body', async (_n, req, status, code) => {
    const res = await check(client, envoyCheckRequest(req));
    expect(res.http_response).toBe('denied_response');
    expect(res.status.code).not.toBe(0);
    expect(res.denied_response.status.code).toBe(status);
    expect(JSON.parse(res.denied_response.body).code).toBe(code);
    expect(headerOf(res.denied_response.headers, 'content-type')?.header.value).toBe('application/json');
    expect(headerOf(res.denied_response.headers, 'x-sandgate-error')?.header.value).toBe(code);
  });

  it('answers browsers with an HTML page', async () => {
    const res = await check(client, envoyCheckRequest({ host: '8000-nope.team-a.localhost', headers: { accept: 'text/html,application/xhtml+xml' } }));
    expect(headerOf(res.denied_response.headers, 'content-type')?.header.value).toContain('text/html');
    expect(res.denied_response.body).toContain('<!doctype html>');
  });

  it('holds a request in a readiness gap and allows it when the supervisor connects', async () => {
    const pending = check(client, envoyCheckRequest({ host: '8888-notebook.team-a.localhost' }));
    await eventually(() => t.gw.view.waiters.size === 1, 5000, 'the request to wait for readiness');
    t.gw.view.setPresence('team-a', 'notebook', presence());
    const res = await pending;
    expect(headerOf(res.ok_response.headers, 'x-sandgate-upstream')?.header.value).toBe('127.0.0.3:8888');
    t.gw.view.setPresence('team-a', 'notebook', undefined);
  });

  it('gives up after the readiness wait with 503 sandbox_not_ready, Retry-After, phase and reason', async () => {
    const res = await check(client, envoyCheckRequest({ host: '8888-notebook.team-a.localhost' }));
    expect(res.denied_response.status.code).toBe('ServiceUnavailable');
    const body = JSON.parse(res.denied_response.body);
    expect(body).toMatchObject({ code: 'sandbox_not_ready', phase: 'Provisioning', reason: 'SupervisorNotConnected', namespace: 'team-a', name: 'notebook' });
    expect(headerOf(res.denied_response.headers, 'retry-after')?.header.value).toBe('1');
  });

  it('a waiting request that turns final (failed) is denied at once', async () => {
    const pending = check(client, envoyCheckRequest({ host: '8888-notebook.team-a.localhost' }));
    await eventually(() => t.gw.view.waiters.size === 1, 5000, 'the request to wait for readiness');
    driver.upsert(snapshot({ name: 'notebook', uid: 'u2', resourceVersion: '2', state: 'failed', conditions: [cond('Ready', 'False', 'PodFailed', 'boom')] }));
    const res = await pending;
    expect(JSON.parse(res.denied_response.body).code).toBe('sandbox_failed');
  });

  it('counts decisions in /metrics', async () => {
    const text = await (await fetch(`${t.admin}/metrics`)).text();
    expect(text).toMatch(/sandgate_edge_decisions_total\{door="ext_authz",outcome="allow",code="ok"\} [1-9]/);
    expect(text).toMatch(/sandgate_edge_decisions_total\{door="ext_authz",outcome="deny",code="sandbox_not_found"\} [1-9]/);
    expect(text).toContain('sandgate_edge_decision_duration_seconds_bucket');
    expect(text).toMatch(/sandgate_view_sandboxes 3/);
  });
});

/** grpc.health.v1.Health/Check for one service name, with a client built from the same health.proto. */
function healthOf(target: string, service: string): Promise<string> {
  const Client = makeGenericClientConstructor(healthService, 'Health');
  const client = new Client(target, credentials.createInsecure()) as unknown as { Check(r: unknown, cb: (e: Error | null, v: { status: string }) => void): void; close(): void };
  return new Promise((resolve, reject) =>
    client.Check({ service }, (err, res) => {
      client.close();
      if (err) reject(err);
      else resolve(res.status);
    }),
  );
}

describe('ext_authz before the drivers have synced', () => {
  it('denies with 503 gateway_not_ready and gRPC health says NOT_SERVING until synced', async () => {
    const driver = new TestDriver([], 'slow', true);
    const t = await startTestGateway([driver]);
    const client = authzClient(t.grpcTarget);
    try {
      expect(await healthOf(t.grpcTarget, '')).toBe('NOT_SERVING');
      expect(await healthOf(t.grpcTarget, 'envoy.service.auth.v3.Authorization')).toBe('NOT_SERVING');
      const res = await check(client, envoyCheckRequest({ host: '8000-web.team-a.localhost' }));
      expect(JSON.parse(res.denied_response.body).code).toBe('gateway_not_ready');
      const ready = await fetch(`${t.admin}/readyz`);
      expect(ready.status).toBe(503);
      expect((await json(ready)).notReady).toEqual(['driver slow has not synced']);
      driver.sync([snapshot({ sessionModel: 'none' })]);
      expect((await fetch(`${t.admin}/readyz`)).status).toBe(200);
      expect(await healthOf(t.grpcTarget, '')).toBe('SERVING');
      expect(await healthOf(t.grpcTarget, 'envoy.service.ext_proc.v3.ExternalProcessor')).toBe('SERVING');
      const ok = await check(client, envoyCheckRequest({ host: '8000-web.team-a.localhost' }));
      expect(ok.http_response).toBe('ok_response');
    } finally {
      client.close();
      await t.close();
    }
  });
});

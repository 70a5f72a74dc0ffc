import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rawRequest } from '../helpers/upstream.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { isAuthzPath } from '../../src/edge/http-authz.js';

/** Raw request with a chosen Host header (fetch does not let us set Host). */
function get(base: string, path: string, headers: Record<string, string>): ReturnType<typeof rawRequest> {
  return rawRequest(Number(new URL(base).port), path, headers);
}

describe('HTTP authz (Envoy http_service, nginx auth_request)', () => {
  let t: TestGateway;
  beforeAll(async () => {
    t = await startTestGateway([new TestDriver([snapshot({ name: 'web', sessionModel: 'none', ports: [8000], endpoint: { kind: 'address', addresses: ['127.0.0.2'] } })])], {
      readinessWaitMs: 0,
      pathPrefix: 'sbx',
    });
  });
  afterAll(() => t.close());

  it('200 with the upstream header for a sandbox host (Envoy path_prefix /authz)', async () => {
    const r = await get(t.admin, '/authz/some/path', { host: '8000-web.team-a.localhost' });
    expect(r.status).toBe(200);
    expect(r.headers['x-sandgate-upstream']).toBe('127.0.0.2:8000');
    expect(r.headers['x-sandgate-sandbox']).toBe('team-a/web');
  });

  it('nginx auth_request: the original URI comes in X-Original-URI', async () => {
    const r = await get(t.admin, '/authz', { host: 'gw.example.com', 'x-original-uri': '/sbx/team-a/web/8000/app?x=1' });
    expect(r.status).toBe(200);
    expect(r.headers['x-sandgate-path']).toBe('/app?x=1');
  });

  it('a client-sent upstream header does not survive', async () => {
    const r = await get(t.admin, '/authz/', { host: '8000-web.team-a.localhost', 'x-sandgate-upstream': '10.9.9.9:1' });
    expect(r.headers['x-sandgate-upstream']).toBe('127.0.0.2:8000');
  });

  it.each([
    ['unknown sandbox', { host: '8000-nope.team-a.localhost' }, 404, 'sandbox_not_found'],
    ['port not allowed', { host: '22-web.team-a.localhost' }, 403, 'port_not_allowed'],
    ['bad port header', { host: 'gw', 'x-sandbox-id': 'web', 'x-sandbox-port': '-1' }, 400, 'invalid_route'],
    ['duplicate conflicting ids (joined by Node)', { host: 'gw', 'x-sandbox-id': ['web', 'api'] as unknown as string }, 400, 'invalid_route'],
    ['two X-Forwarded-Host headers', { host: 'gw', 'x-forwarded-host': ['8000-web.team-a.localhost', '8000-web.team-b.localhost'] as unknown as string }, 400, 'invalid_route'],
  ])('denies %s', async (_n, headers, status, code) => {
    const r = await get(t.admin, '/authz/', headers);
    expect(r.status).toBe(status);
    expect(r.headers['content-type']).toBe('application/json');
    expect(JSON.parse(r.body).code).toBe(code);
  });

  it('reads header names in any case (nginx passes the client\'s own), and lists every removed one in lower case', async () => {
    const r = await get(t.admin, '/authz/', { Host: 'gw', 'X-Sandbox-Id': 'web', 'X-Sandbox-Namespace': 'team-a', 'X-Sandbox-Port': '8000', 'X-Sandgate-Trusted-User': 'root', Authorization: 'Bearer x' });
    expect(r.status).toBe(200);
    expect(r.headers['x-sandgate-upstream']).toBe('127.0.0.2:8000');
    expect(String(r.headers['x-envoy-auth-headers-to-remove']).split(',').sort()).toEqual(['authorization', 'x-sandbox-id', 'x-sandbox-namespace', 'x-sandbox-port', 'x-sandgate-trusted-user']);
  });

  it.each([
    ['application/json', 'application/json'],
    ['text/html', 'text/html; charset=utf-8'],
  ])('two Host headers → 400 invalid_route, answered as %s asks', async (accept, type) => {
    const raw = await new Promise<string>((resolve, reject) => {
      const socket = connect(Number(new URL(t.admin).port), '127.0.0.1', () =>
        socket.end(`GET /authz/ HTTP/1.1\r\nHost: 8000-web.team-a.localhost\r\nHost: 8000-other.team-b.localhost\r\nAccept: ${accept}\r\nConnection: close\r\n\r\n`),
      );
      let got = '';
      socket.on('data', (c: Buffer) => (got += c.toString()));
      socket.on('end', () => resolve(got));
      socket.on('error', reject);
    });
    expect(raw.startsWith('HTTP/1.1 400 ')).toBe(true);
    expect(raw.toLowerCase()).toContain(`content-type: ${type}`);
    expect(raw).not.toContain('x-sandgate-upstream');
  });

  it('serves an HTML page to browsers', async () => {
    const r = await get(t.admin, '/authz/', { host: '8000-nope.team-a.localhost', accept: 'text/html' });
    expect(r.status).toBe(404);
    expect(r.body).toContain('No such sandbox');
  });
});

describe('isAuthzPath (which admin-port paths the HTTP authz door answers)', () => {
  it.each([
    ['/authz', true],
    ['/authz/', true],
    ['/authz/api/v1/files?path=%2F', true],
    ['/authz?x=1', true],
    ['/authzx', false],
    ['/authz%2F', false],
    ['/auth', false],
    ['/api/authz/', false],
    ['', false],
  ])('%j → %s', (url, want) => expect(isAuthzPath(url)).toBe(want));
});

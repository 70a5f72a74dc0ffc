import { Metadata, type ClientDuplexStream } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rawRequest } from '../helpers/upstream.js';
import { authzClient, check, envoyCheckRequest, envoyRequestHeaders, extProcClient, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';

/**
 * The E2B SDK's two addressing modes at the Envoy doors (ext_authz, ext_proc, HTTP authz) — no Envoy
 * binary runs here, so the doors get what Envoy sends them: the same decisions as the embedded proxy,
 * the envd token left on the request, the gateway's credentials removed, and E2B-shaped denials.
 */

const ENVD = 'envd-token-1';
const TRAFFIC = 'traffic-token-1';
const DOMAIN = 'sandgate.test';

/** The SDK's requests, as Envoy sees them: sandbox-URL mode (shared host + E2B headers) and host mode. */
const MODES = {
  'sandbox-url': (id: string, port: number) => ({ host: 'sandboxes.example.com', headers: { 'e2b-sandbox-id': id, 'e2b-sandbox-port': String(port) } }),
  host: (id: string, port: number) => ({ host: `${port}-${id}.${DOMAIN}`, headers: {} as Record<string, string> }),
};

type Stream = ClientDuplexStream<unknown, Record<string, any>>;

function extProc(client: ReturnType<typeof extProcClient>, headers: Record<string, string>): Promise<Record<string, any>> {
  const s = (client.Process as (m: Metadata, o: unknown) => Stream)(new Metadata(), {});
  return new Promise((resolve, reject) => {
    s.once('data', (m: Record<string, any>) => {
      s.end();
      s.resume();
      resolve(m);
    });
    s.once('error', reject);
    s.write(envoyRequestHeaders({ ':method': 'GET', ':scheme': 'http', ':path': '/files?path=/a', 'x-request-id': 'r-1', ...headers }));
  });
}

function httpAuthz(admin: string, host: string, headers: Record<string, string>): ReturnType<typeof rawRequest> {
  return rawRequest(Number(new URL(admin).port), '/authz/files', { host, ...headers });
}

describe('E2B addressing at the Envoy doors', () => {
  let t: TestGateway;
  let authz: ReturnType<typeof authzClient>;
  let proc: ReturnType<typeof extProcClient>;
  beforeAll(async () => {
    const at = { kind: 'address', addresses: ['10.4.0.7'] } as const;
    t = await startTestGateway(
      [
        new TestDriver([
          snapshot({ name: 'live', uid: 'u1', ids: ['sbx-live'], sessionModel: 'none', endpoint: at, accessToken: TRAFFIC, envdAccessToken: ENVD }),
          snapshot({ name: 'paused', uid: 'u2', ids: ['sbx-paused'], state: 'paused', sessionModel: 'none', endpoint: at }),
          snapshot({ name: 'starting', uid: 'u3', ids: ['sbx-starting'], endpoint: at }),
        ]),
      ],
      { baseDomain: DOMAIN, readinessWaitMs: 0 },
    );
    ({ authz, proc } = t.envoyClients());
  });
  afterAll(async () => {
    await t.close();
  });

  for (const [mode, req] of Object.entries(MODES)) {
    it(`${mode}: envd calls are allowed with X-Access-Token left on, the traffic token and E2B headers removed`, async () => {
      const r = req('sbx-live', 49983);
      const headers = { ...r.headers, 'x-access-token': ENVD, 'e2b-traffic-access-token': TRAFFIC };
      const res = await check(authz, envoyCheckRequest({ host: r.host, headers }));
      expect(res.status.code).toBe(0);
      expect(res.ok_response.headers.find((h: any) => h.header.key === 'x-sandgate-upstream')?.header.value).toBe('10.4.0.7:49983');
      const removed: string[] = res.ok_response.headers_to_remove;
      expect(removed).toContain('e2b-traffic-access-token');
      if (mode === 'sandbox-url') expect(removed).toContain('e2b-sandbox-id');
      expect(removed).not.toContain('x-access-token');

      const m = await extProc(proc, { ':authority': r.host, ...headers });
      expect(m.request_headers.response.header_mutation.remove_headers).not.toContain('x-access-token');
      expect(m.request_headers.response.header_mutation.remove_headers).toContain('e2b-traffic-access-token');

      const h = await httpAuthz(t.admin, r.host, headers);
      expect(h.status).toBe(200);
      expect(String(h.headers['x-envoy-auth-headers-to-remove'])).not.toContain('x-access-token');
    });

    it.each([
      ['a wrong envd token', 'sbx-live', 49983, { 'x-access-token': 'nope' }, 401, 'envd_token_invalid'],
      ['the right envd token smuggled beside a wrong one', 'sbx-live', 49983, { 'x-access-token': `nope,${ENVD}` }, 401, 'envd_token_invalid'],
      ['a user port without the traffic token', 'sbx-live', 3000, {}, 401, 'token_required'],
      ['an unknown sandbox', 'sbx-ghost', 49983, {}, 502, 'sandbox_not_found'],
      ['a paused sandbox', 'sbx-paused', 49983, {}, 502, 'sandbox_paused'],
      ['a sandbox not ready yet', 'sbx-starting', 49983, {}, 429, 'sandbox_not_ready'],
    ] as const)(`${mode}: %s → the same E2B-shaped denial at every door`, async (_n, id, port, extra, status, code) => {
      const r = req(id, port);
      const headers = { ...r.headers, ...extra };
      const res = await check(authz, envoyCheckRequest({ host: r.host, headers }));
      expect(res.denied_response.status.code).toBe({ 401: 'Unauthorized', 429: 'TooManyRequests', 502: 'BadGateway' }[status]);
      expect(JSON.parse(res.denied_response.body).code).toBe(code);
      const m = await extProc(proc, { ':authority': r.host, ...headers });
      expect(m.immediate_response.details).toBe(code);
      const h = await httpAuthz(t.admin, r.host, headers);
      expect([h.status, JSON.parse(h.body).code]).toEqual([status, code]);
    });
  }
});

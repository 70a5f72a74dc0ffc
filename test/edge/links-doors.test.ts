import { Metadata, type ClientDuplexStream } from '@grpc/grpc-js';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mintLinkToken, type LinkRequestClaims } from '../../src/auth/link-tokens.js';
import { authzClient, check, envoyCheckRequest, envoyRequestHeaders, extProcClient, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { ed25519Pem, linkKeySet, writeLinkKeys } from '../helpers/link-keys.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { rawRequest } from '../helpers/upstream.js';

/** Envoy's HttpStatus codes as the protos' enum names (grpc-js hands enums as strings). */
const STATUS: Record<string, number> = { SeeOther: 303, Unauthorized: 401, Forbidden: 403, NotFound: 404 };

/**
 * Signed links through the Envoy doors: ext_authz (gRPC), ext_proc and HTTP authz answer a link exactly as
 * the embedded proxy does — the 303 with Set-Cookie as a denied response with headers, the cookie read
 * from the `cookie` header Envoy forwards and taken out of what reaches the sandbox (the sandbox's own
 * cookies set back, or the header removed), the same codes.
 */

/** One door's answer, reduced to what the three share. */
interface DoorAnswer {
  readonly status: number;
  /** Response headers of a denial (lower-case names). */
  readonly headers: Record<string, string>;
  readonly body: string;
  /** On an allow: the Cookie the sandbox gets (null: the header removed; undefined: left as it was). */
  readonly cookie?: string | null | undefined;
}

type Ask = (p: { host: string; path: string; headers?: Record<string, string>; scheme?: string; method?: string }) => Promise<DoorAnswer>;
type Stream = ClientDuplexStream<unknown, Record<string, any>>;

describe('signed links through the Envoy doors', () => {
  const PRIVATE = ed25519Pem().privateKey;
  let dir: string;
  let t: TestGateway;
  let authz: ReturnType<typeof authzClient>;
  let proc: ReturnType<typeof extProcClient>;
  const HOST = '3000-web.team-a.localhost';
  const mint = async (over: Partial<LinkRequestClaims> = {}, now = Date.now()) =>
    (await mintLinkToken(linkKeySet([{ kid: 'k1', privateKey: PRIVATE }]), { namespace: 'team-a', name: 'web', uid: 'uid-1', port: 3000, team: 'team-a', ttlSeconds: 600, ...over }, 86_400, now)).token;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sandgate-link-doors-'));
    await writeLinkKeys(join(dir, 'links.yaml'), [{ kid: 'k1', privateKey: PRIVATE }]);
    t = await startTestGateway([new TestDriver([snapshot({ name: 'web', sessionModel: 'none', accessToken: 'traffic-secret' })])], { linkKeysFile: join(dir, 'links.yaml') });
    ({ authz, proc } = t.envoyClients());
  });
  afterAll(async () => {
    await t.close();
    await rm(dir, { recursive: true, force: true });
  });

  const extAuthz: Ask = async (p) => {
    const req = envoyCheckRequest({ host: p.host, path: p.path, method: p.method, headers: { ':scheme': p.scheme ?? 'http', ...p.headers } });
    req.attributes.request.http.scheme = p.scheme ?? 'http';
    const res = await check(authz, req);
    if (res.http_response === 'ok_response') {
      const set = (res.ok_response.headers as { header: { key: string; value: string } }[]).find((h) => h.header.key === 'cookie');
      const removed = ((res.ok_response.headers_to_remove ?? []) as string[]).includes('cookie');
      return { status: 200, headers: {}, body: '', cookie: set !== undefined ? set.header.value : removed ? null : undefined };
    }
    const headers: Record<string, string> = {};
    for (const h of res.denied_response.headers as { header: { key: string; value: string } }[]) headers[h.header.key] = h.header.value;
    return { status: STATUS[res.denied_response.status.code as string] ?? -1, headers, body: String(res.denied_response.body) };
  };

  const extProc: Ask = async (p) => {
    const stream = (proc.Process as (m: Metadata) => Stream)(new Metadata());
    const answer = new Promise<Record<string, any>>((resolve, reject) => {
      stream.once('data', resolve);
      stream.once('error', reject);
    });
    stream.write(envoyRequestHeaders({ ':authority': p.host, ':path': p.path, ':method': p.method ?? 'GET', ':scheme': p.scheme ?? 'http', ...p.headers }));
    const m = await answer;
    stream.end();
    if (m.request_headers !== undefined) {
      const mutation = m.request_headers.response.header_mutation;
      const set = (mutation.set_headers as { header: { key: string; raw_value: Buffer } }[]).find((h) => h.header.key === 'cookie');
      const removed = ((mutation.remove_headers ?? []) as string[]).includes('cookie');
      return { status: 200, headers: {}, body: '', cookie: set !== undefined ? Buffer.from(set.header.raw_value).toString() : removed ? null : undefined };
    }
    const r = m.immediate_response;
    const headers: Record<string, string> = {};
    for (const h of r.headers.set_headers as { header: { key: string; raw_value: Buffer } }[]) headers[h.header.key] = Buffer.from(h.header.raw_value).toString();
    return { status: STATUS[r.status.code as string] ?? -1, headers, body: Buffer.from(r.body).toString() };
  };

  const httpAuthz: Ask = async (p) => {
    // Envoy's http_service asks with the original method and the headers its allowed_headers list.
    const res = await rawRequest(t.gw.adminPort, `/authz${p.path}`, { 'x-forwarded-host': p.host, 'x-forwarded-proto': p.scheme ?? 'http', ...p.headers }, p.method ?? 'GET');
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(res.headers)) headers[k] = Array.isArray(v) ? v[0]! : String(v);
    const body = res.body;
    if (res.status !== 200) return { status: res.status, headers, body };
    const removed = (headers['x-envoy-auth-headers-to-remove'] ?? '').split(',').includes('cookie');
    return { status: 200, headers: {}, body: '', cookie: headers.cookie !== undefined ? headers.cookie : removed ? null : undefined };
  };

  describe.each<[string, () => Ask]>([
    ['ext_authz', () => extAuthz],
    ['ext_proc', () => extProc],
    ['HTTP authz', () => httpAuthz],
  ])('%s', (_door, door) => {
    it('answers a valid token with the 303 that sets the cookie, as a denied response with headers', async () => {
      const token = await mint();
      const r = await door()({ host: HOST, path: `/app?x=1&sandgate_token=${token}` });
      expect(r.status).toBe(303);
      expect(r.headers.location).toBe('/app?x=1');
      expect(r.headers['set-cookie']).toMatch(new RegExp(`^sandgate_session=${token.replace(/\./g, '\\.')}; Path=/; Max-Age=(59\\d|600); HttpOnly; SameSite=Lax$`));
      expect(r.headers['referrer-policy']).toBe('no-referrer');
      expect(r.headers['cache-control']).toBe('no-store');
      expect(r.headers['x-sandgate-error']).toBe('link_accepted');
      const tls = await door()({ host: HOST, path: `/?sandgate_token=${token}`, scheme: 'https' });
      expect(tls.headers['set-cookie']).toMatch(/; Secure$/);
    });

    it('allows the cookie and gives the sandbox only its own cookies', async () => {
      const token = await mint();
      expect(await door()({ host: HOST, path: '/app', headers: { cookie: `theme=dark; sandgate_session=${token}; sid=7` } })).toMatchObject({ status: 200, cookie: 'theme=dark; sid=7' });
      expect(await door()({ host: HOST, path: '/app', headers: { cookie: `sandgate_session=${token}` } })).toMatchObject({ status: 200, cookie: null });
      const upgrade = await mint({ websocket: true });
      expect(await door()({ host: HOST, path: '/ws', headers: { cookie: `sandgate_session=${upgrade}`, upgrade: 'websocket', connection: 'upgrade' } })).toMatchObject({ status: 200, cookie: null });
    });

    it('refuses what the link does not open, with the same codes as the proxy', async () => {
      const token = await mint({ methods: ['GET'], path: '/app' });
      const cookie = `sandgate_session=${token}`;
      const code = async (p: Parameters<Ask>[0]) => {
        const r = await door()(p);
        return [r.status, r.headers['x-sandgate-error']];
      };
      expect(await code({ host: '3001-web.team-a.localhost', path: '/app', headers: { cookie } })).toEqual([403, 'link_invalid']);
      expect(await code({ host: HOST, path: '/app', method: 'POST', headers: { cookie } })).toEqual([403, 'link_invalid']);
      expect(await code({ host: HOST, path: '/app/../admin', headers: { cookie } })).toEqual([403, 'link_invalid']);
      expect(await code({ host: HOST, path: '/app', headers: { cookie, upgrade: 'websocket', connection: 'upgrade' } })).toEqual([403, 'link_invalid']);
      expect(await code({ host: '3000-web.team-b.localhost', path: '/app', headers: { cookie } })).toEqual([403, 'link_invalid']);
    });

    it('answers an expired link as a page to a browser', async () => {
      const old = await mint({ ttlSeconds: 60 }, Date.now() - 120_000);
      const page = await door()({ host: HOST, path: `/?sandgate_token=${old}`, headers: { accept: 'text/html' } });
      expect(page.status).toBe(401);
      expect(page.headers['content-type']).toMatch(/text\/html/);
      expect(page.body).toMatch(/The link has expired/);
      const api = await door()({ host: HOST, path: '/', headers: { cookie: `sandgate_session=${old}` } });
      expect(JSON.parse(api.body)).toMatchObject({ code: 'link_expired' });
    });

    it('takes no token from a header: the sandbox still wants its traffic token', async () => {
      const token = await mint();
      const r = await door()({ host: HOST, path: '/', headers: { sandgate_token: token } });
      expect([r.status, r.headers['x-sandgate-error']]).toEqual([401, 'token_required']);
      expect(await door()({ host: HOST, path: '/', headers: { 'e2b-traffic-access-token': 'traffic-secret', cookie: 'sid=1' } })).toMatchObject({ status: 200, cookie: undefined });
    });
  });
});

import { Metadata } from '@grpc/grpc-js';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FileApiKeyStore } from '../../src/auth/api-key-file-store.js';
import { newApiKey } from '../../src/auth/api-keys.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { authzClient, check, envoyCheckRequest, envoyRequestHeaders, extProcClient, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { rawRequest, startUpstream, text, viaProxy } from '../helpers/upstream.js';

/**
 * The tenant matrix: (admin, team-a, team-b, no key, revoked key, wrong token, right token) × (own
 * sandbox, other team's sandbox, missing sandbox), through all four doors. "Other team's" must answer
 * exactly like "missing": same status, same body.
 */

const PEPPER = 'pepper-for-tests-0123456789abcdef0123456789';
const TOKEN = 'sandbox-traffic-token-7f3a9c';

interface Answer {
  status: number;
  body: string;
}

describe('tenancy and traffic auth', () => {
  let t: TestGateway;
  let upstream: Awaited<ReturnType<typeof startUpstream>>;
  let seen: Record<string, unknown>[] = [];
  const keys: Record<string, string> = {};
  let authz: ReturnType<typeof authzClient>;
  let proc: ReturnType<typeof extProcClient>;

  beforeAll(async () => {
    upstream = await startUpstream((req, res) => {
      seen.push(req.headers);
      res.end('ok');
    });
    const dir = mkdtempSync(join(tmpdir(), 'sandgate-keys-'));
    const keysFile = join(dir, 'keys.yaml');
    writeFileSync(join(dir, 'pepper'), PEPPER);
    const store = new FileApiKeyStore(keysFile);
    const pepper = new TextEncoder().encode(PEPPER);
    for (const team of ['admin', 'team-a', 'team-b', 'revoked']) {
      const { key, record } = newApiKey(pepper, team === 'revoked' ? 'team-a' : team);
      await store.add(record);
      keys[team] = key;
      if (team === 'revoked') await store.revoke(record.id);
    }
    const at = { kind: 'address' as const, addresses: ['127.0.0.1'] };
    t = await startTestGateway(
      [
        new TestDriver([
          snapshot({ namespace: 'team-a', name: 'web', uid: 'a1', sessionModel: 'none', endpoint: at }),
          snapshot({ namespace: 'team-b', name: 'web', uid: 'b1', sessionModel: 'none', endpoint: at }),
          snapshot({ namespace: 'team-a', name: 'locked', uid: 'a2', sessionModel: 'none', endpoint: at, accessToken: TOKEN }),
          snapshot({ namespace: 'team-b', name: 'locked', uid: 'b2', sessionModel: 'none', endpoint: at, accessToken: TOKEN }),
        ]),
      ],
      { apiKeys: keysFile, keyPepperFile: join(dir, 'pepper'), readinessWaitMs: 0 },
    );
    ({ authz, proc } = t.envoyClients());
  });
  afterAll(async () => {
    await t.close();
    await upstream.close();
  });

  const host = (ns: string, name: string) => `${upstream.port}-${name}.${ns}.localhost`;

  async function viaExtAuthz(h: Record<string, string>, hostName: string): Promise<Answer> {
    const r = await check(authz, envoyCheckRequest({ host: hostName, headers: h }));
    return r.http_response === 'ok_response' ? { status: 200, body: '' } : { status: Number(statusCode(r.denied_response.status.code)), body: r.denied_response.body };
  }

  async function viaExtProc(h: Record<string, string>, hostName: string): Promise<Answer> {
    const s = (proc.Process as (m: Metadata) => any)(new Metadata());
    const msg = await new Promise<any>((resolve, reject) => {
      s.once('data', resolve);
      s.once('error', reject);
      s.write(envoyRequestHeaders({ ':authority': hostName, ':path': '/', ':method': 'GET', ...h }));
    });
    s.end();
    if (msg.request_headers !== undefined) return { status: 200, body: '' };
    return { status: Number(statusCode(msg.immediate_response.status.code)), body: Buffer.from(msg.immediate_response.body).toString() };
  }

  async function viaHttpAuthz(h: Record<string, string>, hostName: string): Promise<Answer> {
    const r = await rawRequest(t.gw.adminPort, '/authz/', { ...h, host: hostName });
    return { status: r.status, body: r.body };
  }

  async function viaEmbeddedProxy(h: Record<string, string>, hostName: string): Promise<Answer> {
    const r = await viaProxy(t.gw.proxyPort!, { host: hostName, headers: h });
    const body = await text(r);
    return { status: r.status, body: r.status === 200 ? '' : body };
  }

  const doors = { ext_authz: viaExtAuthz, ext_proc: viaExtProc, http_authz: viaHttpAuthz, proxy: viaEmbeddedProxy } as const;

  type Who = 'admin' | 'team-a' | 'team-b' | 'no key' | 'revoked key' | 'wrong token' | 'right token' | 'no token';
  const credentials = (who: Who): Record<string, string> => {
    switch (who) {
      case 'admin':
      case 'team-a':
      case 'team-b':
        return { 'x-api-key': keys[who]! };
      case 'no key':
        return {};
      case 'revoked key':
        return { 'x-api-key': keys.revoked! };
      case 'wrong token':
        return { 'x-api-key': keys['team-a']!, 'e2b-traffic-access-token': 'not-the-token' };
      case 'right token':
        return { 'x-api-key': keys['team-a']!, 'e2b-traffic-access-token': TOKEN };
      case 'no token':
        return { 'x-api-key': keys['team-a']! };
    }
  };
  /** [own sandbox, other team's sandbox, missing sandbox] for each caller. */
  const targets = (who: Who): [string, string, string][] => {
    const sandbox = who.includes('token') ? 'locked' : 'web';
    if (who === 'team-b') return [['team-b', sandbox, ''], ['team-a', sandbox, ''], ['team-b', 'nope', '']];
    return [['team-a', sandbox, ''], ['team-b', sandbox, ''], ['team-a', 'nope', '']];
  };
  const expected: Record<Who, [number | string, number | string, number | string]> = {
    admin: [200, 200, 'sandbox_not_found'],
    'team-a': [200, 'sandbox_not_found', 'sandbox_not_found'],
    'team-b': [200, 'sandbox_not_found', 'sandbox_not_found'],
    'no key': ['api_key_required', 'api_key_required', 'api_key_required'],
    'revoked key': ['api_key_invalid', 'api_key_invalid', 'api_key_invalid'],
    'wrong token': ['token_invalid', 'sandbox_not_found', 'sandbox_not_found'],
    'right token': [200, 'sandbox_not_found', 'sandbox_not_found'],
    'no token': ['token_required', 'sandbox_not_found', 'sandbox_not_found'],
  };

  for (const [door, via] of Object.entries(doors)) {
    for (const who of Object.keys(expected) as Who[]) {
      it(`${door}: ${who} × (own, other team's, missing)`, async () => {
        const answers: Answer[] = [];
        for (const [ns, name] of targets(who)) answers.push(await via(credentials(who), host(ns, name)));
        const got = answers.map((a) => (a.status === 200 ? 200 : (JSON.parse(a.body) as { code: string }).code));
        expect(got).toEqual(expected[who]);
        // Another team's sandbox answers exactly like a missing one: same status, same body (the admin
        // team reaches every namespace, so for it the two differ by design).
        if (who !== 'admin') expect(answers[1]).toEqual(answers[2]);
      });
    }
  }

  it('gateway credentials never reach the sandbox (proxy) and are removed by the Envoy doors; the envd token is forwarded', async () => {
    seen = [];
    const sent = { 'x-api-key': keys['team-a']!, 'e2b-traffic-access-token': TOKEN, 'x-access-token': 'envd-token', authorization: 'Bearer abc' };
    const r = await viaProxy(t.gw.proxyPort!, { host: host('team-a', 'locked'), headers: sent });
    expect(r.status).toBe(200);
    await text(r);
    for (const h of ['x-api-key', 'authorization', 'e2b-traffic-access-token']) expect(seen[0]![h], h).toBeUndefined();
    expect(seen[0]!['x-access-token']).toBe('envd-token');
    const res = await check(authz, envoyCheckRequest({ host: host('team-a', 'locked'), headers: sent }));
    expect(res.ok_response.headers_to_remove.sort()).toEqual(['authorization', 'e2b-traffic-access-token', 'x-api-key']);
  });

  it('never logs a key, a token or the pepper', () => {
    const all = t.logs.raw.join('');
    expect(all.length).toBeGreaterThan(0);
    for (const secret of [...Object.values(keys), TOKEN, PEPPER, 'Bearer abc']) expect(all).not.toContain(secret);
  });
});

/** Envoy's HttpStatus enum names, as proto-loader decodes them. */
function statusCode(code: string | number): number {
  const names: Record<string, number> = { OK: 200, BadRequest: 400, Unauthorized: 401, Forbidden: 403, NotFound: 404, Conflict: 409, Gone: 410, TooManyRequests: 429, BadGateway: 502, ServiceUnavailable: 503, GatewayTimeout: 504 };
  return typeof code === 'number' ? code : names[code]!;
}

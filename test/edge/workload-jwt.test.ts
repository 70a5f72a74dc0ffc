import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { exportJWK, exportSPKI, generateKeyPair, SignJWT, type JWK } from 'jose';

type KeyLike = Awaited<ReturnType<typeof generateKeyPair>>["privateKey"];
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FileApiKeyStore } from '../../src/auth/api-key-file-store.js';
import { newApiKey } from '../../src/auth/api-keys.js';
import type { SandboxAccess } from '../../src/domain/access-policy.js';
import { envoyDoors, TRANSPORT_HEADERS, type Ask, type DoorAnswer } from '../helpers/door-answers.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { startUpstream, text, viaProxy } from '../helpers/upstream.js';

/**
 * Workload JWTs at every door: tokens minted by a local issuer (a real JWKS server on loopback) and by a
 * Kubernetes-shaped issuer (projected service-account tokens: the namespace in `kubernetes.io`, keys
 * given inline as `/openid/v1/jwks` serves them). A token is a credential only on a port whose policy
 * names its issuer; every hostile variant is refused, and the token never reaches the sandbox.
 */

const PEPPER = 'pepper-for-tests-0123456789abcdef0123456789';
const LOCAL = 'https://idp.test.local';
const K8S = 'https://kubernetes.default.svc.cluster.local';

describe('workload JWTs at every door', () => {
  let dir: string;
  let t: TestGateway;
  let up: Awaited<ReturnType<typeof startUpstream>>;
  let jwksServer: Awaited<ReturnType<typeof startUpstream>>;
  let jwksFetches = 0;
  let seen: Record<string, unknown>[] = [];
  let extAuthz: Ask;
  let extProc: Ask;
  let httpAuthz: Ask;
  let localKey: KeyLike;
  let localPublicPem: string;
  let k8sKey: KeyLike;
  let teamAKey: string;

  const local = (claims: Record<string, unknown>, o: { kid?: string; iss?: string; exp?: number; key?: KeyLike } = {}) =>
    new SignJWT({ team: 'team-a', ...claims })
      .setProtectedHeader({ alg: 'RS256', kid: o.kid ?? 'local-1' })
      .setIssuer(o.iss ?? LOCAL)
      .setSubject('agent-7')
      .setAudience((claims.aud as string | undefined) ?? 'sandgate')
      .setExpirationTime(o.exp ?? Math.floor(Date.now() / 1000) + 600)
      .sign(o.key ?? localKey);
  const k8s = (namespace: string, sa = 'agent') =>
    new SignJWT({ 'kubernetes.io': { namespace, serviceaccount: { name: sa, uid: 'sa-uid' } } })
      .setProtectedHeader({ alg: 'RS256', kid: 'k8s-1' })
      .setIssuer(K8S)
      .setSubject(`system:serviceaccount:${namespace}:${sa}`)
      .setAudience('sandgate')
      .setExpirationTime(Math.floor(Date.now() / 1000) + 600)
      .sign(k8sKey);

  beforeAll(async () => {
    const localPair = await generateKeyPair('RS256');
    localKey = localPair.privateKey;
    localPublicPem = await exportSPKI(localPair.publicKey);
    const k8sPair = await generateKeyPair('RS256');
    k8sKey = k8sPair.privateKey;
    const localJwk: JWK = { ...(await exportJWK(localPair.publicKey)), kid: 'local-1', alg: 'RS256', use: 'sig' };
    const k8sJwk: JWK = { ...(await exportJWK(k8sPair.publicKey)), kid: 'k8s-1', alg: 'RS256', use: 'sig' };
    jwksServer = await startUpstream((_req, res) => {
      jwksFetches++;
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: [localJwk] }));
    });
    up = await startUpstream((req, res) => {
      seen.push(req.headers);
      res.writeHead(200).end('sandbox app');
    });
    dir = await mkdtemp(join(tmpdir(), 'sandgate-jwt-'));
    await writeFile(join(dir, 'pepper'), PEPPER);
    const store = new FileApiKeyStore(join(dir, 'keys.yaml'));
    const { key, record } = newApiKey(new TextEncoder().encode(PEPPER), 'team-a');
    await store.add(record);
    teamAKey = key;
    await writeFile(
      join(dir, 'issuers.yaml'),
      JSON.stringify({
        issuers: [
          { issuer: LOCAL, jwksUrl: `http://127.0.0.1:${jwksServer.port}/jwks`, audiences: ['sandgate', 'other-service'], teamClaim: 'team' },
          { issuer: K8S, jwks: { keys: [k8sJwk] }, audiences: ['sandgate'], teamClaim: 'kubernetes.io.namespace' },
        ],
      }),
    );
    const at = { kind: 'address' as const, addresses: ['127.0.0.1'] };
    const jwtOnly: SandboxAccess = {
      ports: {
        [up.port]: [
          { kind: 'jwt', issuer: LOCAL, audience: 'sandgate', claims: [] },
          { kind: 'jwt', issuer: K8S, audience: undefined, claims: [{ claim: 'kubernetes.io.serviceaccount.name', values: ['agent'] }] },
        ],
      },
    };
    t = await startTestGateway(
      [
        new TestDriver([
          snapshot({ namespace: 'team-a', name: 'web', uid: 'a1', sessionModel: 'none', endpoint: at, access: jwtOnly }),
          snapshot({ namespace: 'team-a', name: 'keys', uid: 'a2', sessionModel: 'none', endpoint: at }),
          snapshot({ namespace: 'team-b', name: 'web', uid: 'b1', sessionModel: 'none', endpoint: at, access: jwtOnly }),
        ]),
      ],
      { apiKeys: join(dir, 'keys.yaml'), keyPepperFile: join(dir, 'pepper'), jwtIssuersFile: join(dir, 'issuers.yaml'), stripCredentials: ['x-api-key'], readinessWaitMs: 0 },
    );
    ({ extAuthz, extProc, httpAuthz } = envoyDoors(t));
  });
  afterAll(async () => {
    await t.close();
    await up.close();
    await jwksServer.close();
    await rm(dir, { recursive: true, force: true });
  });

  const proxy: Ask = async (p) => {
    const r = await viaProxy(t.gw.proxyPort!, { host: p.host, path: p.path, method: p.method, headers: p.headers });
    const body = await text(r);
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(r.headers)) if (!TRANSPORT_HEADERS.has(k)) headers[k] = Array.isArray(v) ? v.join(', ') : String(v);
    return { status: r.status, headers, body };
  };
  const code = (r: DoorAnswer): number | string => (r.status === 200 ? 200 : (r.headers['x-sandgate-error'] ?? r.status));
  const WEB = () => `${up.port}-web.team-a.localhost`;
  const bearer = (jwt: string) => ({ authorization: `Bearer ${jwt}` });

  describe.each<[string, () => Ask]>([
    ['proxy', () => proxy],
    ['ext_authz', () => extAuthz],
    ['ext_proc', () => extProc],
    ['HTTP authz', () => httpAuthz],
  ])('%s', (door, ask) => {
    it('lets in a token of a named issuer, and the token never reaches the sandbox', async () => {
      seen = [];
      const r = await ask()({ host: WEB(), headers: bearer(await local({})) });
      expect(code(r)).toBe(200);
      expect(code(await ask()({ host: WEB(), headers: bearer(await k8s('team-a')) }))).toBe(200);
      if (door === 'proxy') {
        expect(r.body).toBe('sandbox app');
        expect(seen.every((h) => h.authorization === undefined)).toBe(true);
      } else expect(r.removed).toContain('authorization');
    });

    it('refuses the hostile tokens', async () => {
      const host = WEB();
      // Another audience the issuer serves: valid at the issuer, not for this port (token substitution).
      expect(code(await ask()({ host, headers: bearer(await local({ aud: 'other-service' })) }))).toBe('access_denied');
      expect(code(await ask()({ host, headers: bearer(await local({ aud: 'nobody' })) }))).toBe('jwt_invalid');
      // An issuer not configured: no credential at all.
      expect(code(await ask()({ host, headers: bearer(await local({}, { iss: 'https://evil.example' })) }))).toBe('api_key_required');
      expect(code(await ask()({ host, headers: bearer(await local({}, { exp: Math.floor(Date.now() / 1000) - 3600 })) }))).toBe('jwt_invalid');
      const payload = Buffer.from(JSON.stringify({ iss: LOCAL, sub: 'x', aud: 'sandgate', team: 'team-a', exp: Math.floor(Date.now() / 1000) + 600 })).toString('base64url');
      const none = `${Buffer.from(JSON.stringify({ alg: 'none' })).toString('base64url')}.${payload}.`;
      expect(code(await ask()({ host, headers: bearer(none) }))).toBe('jwt_invalid');
      const hs = await new SignJWT({ team: 'team-a' }).setProtectedHeader({ alg: 'HS256', kid: 'local-1' }).setIssuer(LOCAL).setSubject('x').setAudience('sandgate').setExpirationTime('10m').sign(new TextEncoder().encode(localPublicPem));
      expect(code(await ask()({ host, headers: bearer(hs) }))).toBe('jwt_invalid');
      const stranger = (await generateKeyPair('RS256')).privateKey;
      expect(code(await ask()({ host, headers: bearer(await local({}, { kid: `unknown-${door}`, key: stranger })) }))).toBe('jwt_invalid');
      expect(code(await ask()({ host, headers: bearer(await local({}, { key: stranger })) }))).toBe('jwt_invalid');
      // A service account the port's claim condition leaves out.
      expect(code(await ask()({ host, headers: bearer(await k8s('team-a', 'intruder')) }))).toBe('access_denied');
    });

    it("answers a team-b token on team-a's sandbox exactly as a missing sandbox", async () => {
      const foreign = await ask()({ host: WEB(), headers: bearer(await k8s('team-b')) });
      const missing = await ask()({ host: `${up.port}-nope.team-a.localhost`, headers: bearer(await k8s('team-b')) });
      expect(code(foreign)).toBe('sandbox_not_found');
      expect([foreign.status, foreign.body]).toEqual([missing.status, missing.body]);
      expect(code(await ask()({ host: `${up.port}-web.team-b.localhost`, headers: bearer(await k8s('team-b')) }))).toBe(200);
    });

    it('takes a JWT only on a port whose policy names its issuer, and never from the query', async () => {
      const jwt = await local({});
      expect(code(await ask()({ host: `${up.port}-keys.team-a.localhost`, headers: bearer(jwt) }))).toBe('api_key_required');
      expect(code(await ask()({ host: `${up.port}-keys.team-a.localhost`, headers: { 'x-api-key': teamAKey } }))).toBe(200);
      expect(code(await ask()({ host: WEB(), path: `/?access_token=${jwt}` }))).toBe('api_key_required');
      // The team's own key on a port whose policy leaves keys out: the sandbox exists, the policy refuses.
      expect(code(await ask()({ host: WEB(), headers: { 'x-api-key': teamAKey } }))).toBe('access_denied');
    });
  });

  it('keeps working on cached keys with the issuer down, and stays ready', async () => {
    const before = jwksFetches;
    await jwksServer.close();
    expect(code(await proxy({ host: WEB(), headers: bearer(await local({ fresh: 1 })) }))).toBe(200);
    expect(jwksFetches).toBe(before);
    const ready = await fetch(`${t.admin}/readyz`);
    expect(ready.status).toBe(200);
  });
});

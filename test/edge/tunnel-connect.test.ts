import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FileApiKeyStore } from '../../src/auth/api-key-file-store.js';
import { newApiKey } from '../../src/auth/api-keys.js';
import { ed25519Pem, writeLinkKeys } from '../helpers/link-keys.js';
import { rawRequest } from '../helpers/upstream.js';
import type { Server } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeApiKeyFiles } from '../helpers/api-key-files.js';
import { eventually } from '../helpers/eventually.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { makeCa, needsOpenssl, OPENSSL, type TestCa } from '../helpers/tls-certs.js';
import { rawConnect, refusalBody, roundTrip, startEcho, startFirehose, firehoseBlocked } from '../helpers/tunnel-client.js';

/**
 * HTTP/1.1 CONNECT at the embedded proxy (docs/tunnels.md): a TCP echo server is the sandbox's port
 * declared `tcp`; raw clients open tunnels on the plain and the TLS port, and hostile ones try every
 * refusal — no credential, another tenant's sandbox, a port not declared TCP, any other host, a flood past
 * the namespace's share, a client that never reads, a tunnel left idle.
 */

const PEPPER = 'pepper-for-tunnel-tests-0123456789abcdef0123456';
const PER_NAMESPACE = 3;

describe('CONNECT tunnels at the embedded proxy', () => {
  let t: TestGateway;
  let echo: Awaited<ReturnType<typeof startEcho>>;
  let firehose: Awaited<ReturnType<typeof startFirehose>>;
  let keys: Record<'team-a' | 'team-b' | 'team-c', string>;
  let ca: TestCa | undefined;
  const servers: Server[] = [];
  const box = { sessionModel: 'none' as const, endpoint: { kind: 'address' as const, addresses: ['127.0.0.1'] } };
  const authA = (): Record<string, string> => ({ 'proxy-authorization': `Bearer ${keys['team-a']}` });

  beforeAll(async () => {
    echo = await startEcho();
    firehose = await startFirehose();
    servers.push(echo.server, firehose.server);
    const k = await writeApiKeyFiles(PEPPER, { 'team-a': 'team-a', 'team-b': 'team-b', 'team-c': 'team-c' });
    keys = k.keys;
    const tls: Record<string, unknown> = {};
    if (OPENSSL) {
      ca = makeCa();
      const leaf = ca.issue('proxy', ['*.team-a.localhost']);
      Object.assign(tls, { proxyTlsPort: 0, tlsCertFile: leaf.certFile, tlsKeyFile: leaf.keyFile });
    }
    t = await startTestGateway(
      [
        new TestDriver([
          snapshot({ name: 'web', uid: 'a1', ...box, ports: [echo.port, 8000, firehose.port], tcpPorts: [echo.port, firehose.port] }),
          snapshot({ name: 'starting', uid: 'a2', ...box, state: 'starting', ports: [echo.port], tcpPorts: [echo.port] }),
          snapshot({ namespace: 'team-b', name: 'db', uid: 'b1', ...box, ports: [echo.port], tcpPorts: [echo.port] }),
          snapshot({ namespace: 'team-c', name: 'db', uid: 'c1', ...box, ports: [echo.port], tcpPorts: [echo.port] }),
        ]),
      ],
      { apiKeys: k.keysFile, keyPepperFile: k.pepperFile, readinessWaitMs: 0, tunnelsPerNamespace: PER_NAMESPACE, tunnelIdleTimeout: '1h', ...tls },
    );
  });
  afterAll(async () => {
    await t.close();
    for (const s of servers) s.close();
    ca?.remove();
  });

  const proxy = (): number => t.gw.proxyPort!;

  it('carries the bytes of a declared TCP port both ways, the key in Proxy-Authorization or X-API-Key', async () => {
    const a = await rawConnect(proxy(), `web.team-a.localhost:${echo.port}`, authA());
    expect(a.head).toMatch(/^HTTP\/1\.1 200 /);
    expect(await roundTrip(a, 'hello through CONNECT\n')).toBe('hello through CONNECT\n');
    a.socket.destroy();
    const b = await rawConnect(proxy(), `web.team-a.localhost:${echo.port}`, { 'x-api-key': keys['team-a'] });
    expect(b.status).toBe(200);
    expect(await roundTrip(b, 'again')).toBe('again');
    b.socket.destroy();
  });

  it('bytes sent in the same packet as the CONNECT head reach the sandbox once the tunnel is up', async () => {
    const a = await rawConnect(proxy(), `web.team-a.localhost:${echo.port}`, authA(), 'early bytes|');
    expect(a.status).toBe(200);
    expect(await roundTrip(a, 'late', 'early bytes|late')).toBe('early bytes|late');
    a.socket.destroy();
  });

  it('no credential: 401 api_key_required; a wrong one: 401 api_key_invalid — before any byte is carried', async () => {
    const before = echo.accepted();
    const none = await rawConnect(proxy(), `web.team-a.localhost:${echo.port}`);
    expect(none.status).toBe(401);
    expect((await refusalBody(none)).code).toBe('api_key_required');
    const wrong = await rawConnect(proxy(), `web.team-a.localhost:${echo.port}`, { 'proxy-authorization': 'Bearer not-a-key' });
    expect(wrong.status).toBe(401);
    expect((await refusalBody(wrong)).code).toBe('api_key_invalid');
    expect(echo.accepted()).toBe(before);
  });

  it("another tenant's sandbox answers exactly like a missing one", async () => {
    const other = await rawConnect(proxy(), `db.team-b.localhost:${echo.port}`, authA());
    const missing = await rawConnect(proxy(), `nope.team-b.localhost:${echo.port}`, authA());
    expect(other.status).toBe(404);
    expect(missing.status).toBe(404);
    expect(other.head).toBe(missing.head);
    expect(await refusalBody(other)).toEqual(await refusalBody(missing));
  });

  it('a port not declared TCP: 409 port_not_tcp; a port not exposed: 403 port_not_allowed', async () => {
    const before = echo.accepted();
    const http = await rawConnect(proxy(), 'web.team-a.localhost:8000', authA());
    expect(http.status).toBe(409);
    expect(http.head).toContain('x-sandgate-error: port_not_tcp');
    expect((await refusalBody(http)).code).toBe('port_not_tcp');
    const closed = await rawConnect(proxy(), 'web.team-a.localhost:22', authA());
    expect(closed.status).toBe(403);
    expect((await refusalBody(closed)).code).toBe('port_not_allowed');
    expect(echo.accepted()).toBe(before);
  });

  it('CONNECT to any other host or port is 404 sandbox_not_found, and nothing is dialled', async () => {
    const before = echo.accepted();
    for (const authority of [`127.0.0.1:${echo.port}`, `localhost:${echo.port}`, 'example.com:443', `web.team-a.localhost`, `web.team-a.localhost:0`, `web.team-a.localhost:${echo.port}:${echo.port}`, `[::1]:${echo.port}`, `${echo.port}-web.team-a.localhost:${echo.port}`]) {
      const r = await rawConnect(proxy(), authority, authA());
      expect([authority, r.status]).toEqual([authority, 404]);
      expect((await refusalBody(r)).code).toBe('sandbox_not_found');
    }
    expect(echo.accepted()).toBe(before);
  });

  it('a sandbox in a readiness gap: 503 sandbox_not_ready with Retry-After', async () => {
    const r = await rawConnect(proxy(), `starting.team-a.localhost:${echo.port}`, authA());
    expect(r.status).toBe(503);
    expect(r.head).toMatch(/retry-after: \d+/i);
    expect((await refusalBody(r)).code).toBe('sandbox_not_ready');
  });

  it(`a flood of tunnels past the namespace share gets 429 too_many_tunnels; a closed tunnel frees its place at once`, async () => {
    const authC = { 'proxy-authorization': `Bearer ${keys['team-c']}` };
    const target = `db.team-c.localhost:${echo.port}`;
    const open = await Promise.all(Array.from({ length: PER_NAMESPACE }, () => rawConnect(proxy(), target, authC)));
    expect(open.map((o) => o.status)).toEqual(Array(PER_NAMESPACE).fill(200));
    const past = await Promise.all(Array.from({ length: 5 }, () => rawConnect(proxy(), target, authC)));
    expect(past.map((o) => o.status)).toEqual(Array(5).fill(429));
    expect((await refusalBody(past[0]!)).code).toBe('too_many_tunnels');
    expect(past[0]!.head).toMatch(/retry-after: 1/i);
    // Another namespace has its own share.
    const b = await rawConnect(proxy(), `db.team-b.localhost:${echo.port}`, { 'proxy-authorization': `Bearer ${keys['team-b']}` });
    expect(b.status).toBe(200);
    b.socket.destroy();
    open[0]!.socket.destroy();
    // The gateway sees the close a moment after the client: each attempt before it is refused, and holds nothing.
    const again = await eventually(async () => {
      const r = await rawConnect(proxy(), target, authC);
      if (r.status === 200) return r;
      expect(r.status).toBe(429);
      r.socket.destroy();
      return undefined;
    }, 5000, 'the closed tunnel to free its place');
    for (const o of [...open, again]) o.socket.destroy();
  });

  it('a client that never reads: the sandbox side is held back (bounded buffers), not read without end', async () => {
    const a = await rawConnect(proxy(), `web.team-a.localhost:${firehose.port}`, authA());
    expect(a.status).toBe(200);
    a.stopReading();
    // The client reads nothing more. The firehose must end up waiting for a drain that never comes.
    await firehoseBlocked(firehose);
    // Socket buffers on both hops, and the streams' high-water marks: megabytes at most, never the stream.
    expect(firehose.written()).toBeLessThan(64 * 1024 * 1024);
    a.socket.destroy();
  });

  it.skipIf(!OPENSSL)(needsOpenssl('the TLS port carries CONNECT the same way'), async () => {
    const tls = { ca: readFileSync(ca!.caFile), servername: 'web.team-a.localhost' };
    const a = await rawConnect(t.gw.proxyTlsPort!, `web.team-a.localhost:${echo.port}`, authA(), '', tls);
    expect(a.status).toBe(200);
    expect(await roundTrip(a, 'over TLS')).toBe('over TLS');
    a.socket.destroy();
    const refused = await rawConnect(t.gw.proxyTlsPort!, 'web.team-a.localhost:8000', authA(), '', tls);
    expect(refused.status).toBe(409);
    refused.socket.destroy();
  });
});

describe('an idle tunnel', () => {
  it('is closed after --tunnel-idle-timeout without a byte either way', async () => {
    const echo = await startEcho();
    const box = { sessionModel: 'none' as const, endpoint: { kind: 'address' as const, addresses: ['127.0.0.1'] } };
    const t = await startTestGateway([new TestDriver([snapshot({ name: 'web', ...box, ports: [echo.port], tcpPorts: [echo.port] })])], { tunnelIdleTimeout: '300ms' });
    try {
      const a = await rawConnect(t.gw.proxyPort!, `web.team-a.localhost:${echo.port}`);
      expect(a.status).toBe(200);
      expect(await roundTrip(a, 'x')).toBe('x');
      await a.ended;
    } finally {
      await t.close();
      echo.server.close();
    }
  });
});

describe('a signed link never opens a tunnel', () => {
  it('its session cookie, valid for the port over HTTP, gets a CONNECT to that port 401 api_key_required', async () => {
    const PEPPER = 'p'.repeat(32);
    const dir = await mkdtemp(join(tmpdir(), 'sandgate-tunnel-links-'));
    const echo = await startEcho();
    await writeLinkKeys(join(dir, 'links.yaml'), [{ kid: 'k1', privateKey: ed25519Pem().privateKey }]);
    const store = new FileApiKeyStore(join(dir, 'keys.yaml'));
    const admin = newApiKey(new TextEncoder().encode(PEPPER), 'admin');
    await store.add(admin.record);
    const box = { sessionModel: 'none' as const, endpoint: { kind: 'address' as const, addresses: ['127.0.0.1'] } };
    const t = await startTestGateway([new TestDriver([snapshot({ name: 'web', ...box, ports: [echo.port], tcpPorts: [echo.port] })])], { linkKeysFile: join(dir, 'links.yaml'), linkScheme: 'http', apiKeys: join(dir, 'keys.yaml'), keyPepper: PEPPER, readinessWaitMs: 0 });
    try {
      const minted = await fetch(`${t.admin}/v1/sandboxes/team-a/web/links`, { method: 'POST', headers: { 'x-api-key': admin.key, 'content-type': 'application/json' }, body: JSON.stringify({ port: echo.port, ttlSeconds: 300 }) });
      expect(minted.status).toBe(201);
      const url = new URL(((await minted.json()) as { url: string }).url);
      const host = `${echo.port}-web.team-a.localhost`;
      const first = await rawRequest(t.gw.proxyPort!, url.pathname + url.search, { host });
      expect(first.status).toBe(303);
      const cookie = first.headers['set-cookie']![0]!.split(';')[0]!;
      const before = echo.accepted();
      const tunnel = await rawConnect(t.gw.proxyPort!, `web.team-a.localhost:${echo.port}`, { cookie });
      expect(tunnel.status).toBe(401);
      expect((await refusalBody(tunnel)).code).toBe('api_key_required');
      expect(echo.accepted()).toBe(before);
      // The same cookie passes the access check of an HTTP request to the port (the echo is no HTTP server).
      const http = await rawRequest(t.gw.proxyPort!, '/', { host, cookie });
      expect(http.status).not.toBe(401);
      expect(echo.accepted()).toBe(before + 1);
    } finally {
      await t.close();
      echo.server.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

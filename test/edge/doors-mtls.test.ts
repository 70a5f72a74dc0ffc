import { credentials } from '@grpc/grpc-js';
import { readFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { request } from 'node:https';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { authzClient, check, envoyCheckRequest, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { makeCa, needsOpenssl, OPENSSL, type TestCa } from '../helpers/tls-certs.js';

/**
 * The doors Envoy calls over mutual TLS (`--doors-tls-cert-file`, `--doors-client-ca-file`): a grpc-js
 * client with a certificate from the client CA gets its Check answered; one without a certificate, or
 * with one from another CA, never completes the handshake. The same on the admin port (HTTP authz) and the
 * ops port, and on the relay listener.
 */

describe.skipIf(!OPENSSL)(needsOpenssl('the doors over mutual TLS'), () => {
  let ca: TestCa;
  let stranger: TestCa;
  let t: TestGateway;
  let client: { cert: Buffer; key: Buffer };
  let strangerClient: { cert: Buffer; key: Buffer };

  beforeAll(async () => {
    ca = makeCa('sandgate doors CA');
    stranger = makeCa('another CA');
    const server = ca.issue('doors', ['sandgate.internal', 'localhost']);
    client = ca.issue('envoy', ['envoy.internal'], { client: true });
    strangerClient = stranger.issue('envoy', ['envoy.internal'], { client: true });
    t = await startTestGateway([new TestDriver([snapshot({ name: 'web', sessionModel: 'none', endpoint: { kind: 'address', addresses: ['127.0.0.1'] } })])], {
      doorsTlsCertFile: server.certFile,
      doorsTlsKeyFile: server.keyFile,
      doorsClientCaFile: ca.caFile,
      opsPort: 0,
    });
  });
  afterAll(async () => {
    await t?.close();
    ca?.remove();
    stranger?.remove();
  });

  const target = () => `localhost:${t.gw.grpcPort}`;
  const req = envoyCheckRequest({ host: '8000-web.team-a.localhost' });

  it('grpc-js with a client certificate from the CA: Check is answered', async () => {
    const c = authzClient(target(), credentials.createSsl(readFileSync(ca.caFile), client.key, client.cert));
    try {
      const r = await check(c, req);
      expect(r.status.code).toBe(0);
    } finally {
      c.close();
    }
  });

  it('grpc-js without a client certificate, with one from another CA, or in plaintext (hostile: a downgrade) is refused (UNAVAILABLE)', async () => {
    for (const creds of [credentials.createInsecure(), credentials.createSsl(readFileSync(ca.caFile)), credentials.createSsl(readFileSync(ca.caFile), strangerClient.key, strangerClient.cert)]) {
      const c = authzClient(target(), creds);
      try {
        await expect(check(c, req, 3000)).rejects.toMatchObject({ code: 14 });
      } finally {
        c.close();
      }
    }
  });

  /** GET over https to a door, with or without the client pair; the status, or the error code. */
  function get(port: number, path: string, withCert: boolean, headers: Record<string, string> = {}): Promise<string> {
    return new Promise((resolve) => {
      const r = request({ host: '127.0.0.1', port, path, servername: 'localhost', ca: readFileSync(ca.caFile), ...(withCert ? client : {}), headers }, (res) => {
        res.resume();
        res.on('end', () => resolve(String(res.statusCode)));
      });
      r.on('error', (err) => resolve(`refused ${(err as NodeJS.ErrnoException).code ?? err.message}`));
      r.end();
    });
  }

  it('HTTP authz on the admin port: answered with a client certificate, refused at the handshake without; the ops port speaks TLS to any client (probes)', async () => {
    expect(await get(t.gw.adminPort, '/authz/', true, { host: '8000-web.team-a.localhost' })).toBe('200');
    expect(await get(t.gw.adminPort, '/authz/', false, { host: '8000-web.team-a.localhost' })).toMatch(/^refused/);
    expect(await get(t.gw.adminPort, '/readyz', false)).toMatch(/^refused/);
    expect(await get(t.gw.opsPort!, '/readyz', false)).toBe('200');
    expect(await plainGet(t.gw.opsPort!, '/readyz')).toMatch(/^refused|^400/);
  });

  it('the relay listener speaks TLS with the doors pair: a client certificate from the CA reaches it (401 relay_unauthorized without a relay credential), none or plain HTTP is refused', async () => {
    const relay = await get(t.gw.relayPort, '/', true, { host: '8000-web.team-a.localhost', 'x-sandgate-relay-target': 'team-a/web:8000' });
    expect(relay).toBe('401');
    expect(await get(t.gw.relayPort, '/', false)).toMatch(/^refused/);
    expect(await plainGet(t.gw.relayPort, '/')).toMatch(/^refused/);
  });

  /** Plain HTTP to a TLS port (hostile: a downgrade). */
  function plainGet(port: number, path: string): Promise<string> {
    return new Promise((resolve) => {
      const r = httpRequest({ host: '127.0.0.1', port, path }, (res) => {
        res.resume();
        resolve(String(res.statusCode));
      });
      r.on('error', (err) => resolve(`refused ${(err as NodeJS.ErrnoException).code ?? err.message}`));
      r.end();
    });
  }

  it('a --doors-client-ca-file without a doors certificate refuses to start (config_invalid)', async () => {
    await expect(startTestGateway([new TestDriver([])], { doorsClientCaFile: ca.caFile })).rejects.toMatchObject({ code: 'config_invalid' });
  });
});

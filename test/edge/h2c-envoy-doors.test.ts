import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { SupervisorClient } from '../../src/sessions/supervisor-client.js';
import { envoyDoors, type Ask } from '../helpers/door-answers.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { KEYS, RELAY_SECRET, relaySandbox, supervisedReady } from '../helpers/relay-stack.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';

/**
 * h2c ports behind Envoy: each door Envoy calls (gRPC ext_authz, ext_proc, HTTP authz) answers an allow
 * for a port declared h2c with `x-sandgate-upstream-protocol: h2c` — what the shipped configs route to the
 * HTTP/2 sandbox cluster — and an allow for an HTTP/1.1 port without it. A client's own copy of the header
 * never survives: overwritten on an h2c port, removed on an HTTP/1.1 port. A relay decision's upstream is a
 * relay listener, which takes HTTP/2 for h2c ports: it is marked too. A WebSocket to an h2c port is denied
 * 501 upgrade_not_supported at every door, as the embedded proxy denies it.
 */

const GRPC_PORT = 50051;
const HTTP_PORT = 8000;
const PROTOCOL = 'x-sandgate-upstream-protocol';

describe('the Envoy doors mark h2c ports', () => {
  let t: TestGateway;
  let doors: { extAuthz: Ask; extProc: Ask; httpAuthz: Ask };
  let sup: SupervisorClient;

  beforeAll(async () => {
    const at = { kind: 'address' as const, addresses: ['127.0.0.2'] };
    t = await startTestGateway(
      [
        new TestDriver([
          snapshot({ namespace: 'team-a', name: 'svc', sessionModel: 'none', endpoint: at, ports: [HTTP_PORT, GRPC_PORT], h2cPorts: [GRPC_PORT] }),
          { ...relaySandbox('relayed'), ports: [GRPC_PORT], h2cPorts: [GRPC_PORT] },
        ]),
      ],
      { relaySecret: RELAY_SECRET },
      { supervisorKeys: KEYS },
    );
    sup = await supervisedReady(t.gw, 'relayed');
    doors = envoyDoors(t);
  });
  afterAll(async () => {
    sup?.stop();
    await t?.close();
  });

  const host = (port: number): string => `${port}-svc.team-a.localhost`;
  const GRPC_CALL = { path: '/echo.Echo/Unary', method: 'POST', headers: { 'content-type': 'application/grpc', te: 'trailers' } };

  describe.each(['extAuthz', 'extProc', 'httpAuthz'] as const)('%s', (door) => {
    it('sets the protocol header to h2c for an h2c port, with the upstream address', async () => {
      const a = await doors[door]({ host: host(GRPC_PORT), ...GRPC_CALL });
      expect([a.status, a.set?.['x-sandgate-upstream'], a.set?.[PROTOCOL]]).toEqual([200, `127.0.0.2:${GRPC_PORT}`, 'h2c']);
      expect(a.removed ?? []).not.toContain(PROTOCOL);
    });

    it('sets no protocol header for an HTTP/1.1 port of the same sandbox', async () => {
      const a = await doors[door]({ host: host(HTTP_PORT) });
      expect([a.status, a.set?.['x-sandgate-upstream'], a.set !== undefined && PROTOCOL in a.set]).toEqual([200, `127.0.0.2:${HTTP_PORT}`, false]);
    });

    it('removes a client-sent protocol header on an HTTP/1.1 port (no forced HTTP/2)', async () => {
      const a = await doors[door]({ host: host(HTTP_PORT), headers: { [PROTOCOL]: 'h2c' } });
      expect(a.status).toBe(200);
      expect(a.set !== undefined && PROTOCOL in a.set).toBe(false);
      expect(a.removed).toContain(PROTOCOL);
    });

    it('overwrites a client-sent protocol header on an h2c port', async () => {
      const a = await doors[door]({ host: host(GRPC_PORT), ...GRPC_CALL, headers: { ...GRPC_CALL.headers, [PROTOCOL]: 'http' } });
      expect([a.status, a.set?.[PROTOCOL]]).toEqual([200, 'h2c']);
      expect(a.removed ?? []).not.toContain(PROTOCOL);
    });

    it('marks an h2c port reached over a relay too, beside the relay headers (the relay listener takes HTTP/2)', async () => {
      const a = await doors[door]({ host: `${GRPC_PORT}-relayed.team-a.localhost`, ...GRPC_CALL, headers: { ...GRPC_CALL.headers, [PROTOCOL]: 'http' } });
      expect([a.status, a.set?.['x-sandgate-upstream'], a.set?.['x-sandgate-relay-target'], a.set?.[PROTOCOL]]).toEqual([200, t.gw.relayAddress, `team-a/relayed:${GRPC_PORT}`, 'h2c']);
      expect(a.set?.['x-sandgate-relay-auth']).toMatch(/\S/);
      expect(a.removed ?? []).not.toContain(PROTOCOL);
    });

    it.each([
      ['an HTTP/1.1 upgrade', { upgrade: 'websocket', 'sec-websocket-version': '13', 'sec-websocket-key': 'dGhlIHNhbXBsZSBub25jZQ==' }],
      ['an HTTP/2 extended CONNECT as Envoy presents it', { upgrade: 'websocket', 'sec-websocket-version': '13' }],
    ])('denies a WebSocket (%s) to an h2c port with 501 upgrade_not_supported, direct or relayed', async (_kind, headers) => {
      for (const h of [host(GRPC_PORT), `${GRPC_PORT}-relayed.team-a.localhost`]) {
        const a = await doors[door]({ host: h, path: '/ws', headers });
        expect([a.status, a.headers['x-sandgate-error']], h).toEqual([501, 'upgrade_not_supported']);
        expect(a.headers[PROTOCOL]).toBeUndefined();
      }
    });

    it('allows a WebSocket to an HTTP/1.1 port of the same sandbox', async () => {
      const a = await doors[door]({ host: host(HTTP_PORT), path: '/ws', headers: { upgrade: 'websocket', 'sec-websocket-version': '13' } });
      expect([a.status, a.set?.['x-sandgate-upstream']]).toEqual([200, `127.0.0.2:${HTTP_PORT}`]);
    });

    it('denies a port the sandbox does not list, with no protocol header', async () => {
      const a = await doors[door]({ host: host(GRPC_PORT + 1), headers: { [PROTOCOL]: 'h2c' } });
      expect(a.status).not.toBe(200);
      expect(a.headers[PROTOCOL]).toBeUndefined();
    });
  });
});

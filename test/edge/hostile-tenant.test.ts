import { Metadata } from '@grpc/grpc-js';
import { connect, createServer as createNetServer, type AddressInfo, type Server as NetServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readEvents } from '../helpers/sse.js';
import { writeApiKeyFiles } from '../helpers/api-key-files.js';
import { RelayCredentials } from '../../src/edge/relay/relay-credential.js';
import { SupervisorClient } from '../../src/sessions/supervisor-client.js';
import { mintSupervisorToken } from '../../src/sessions/supervisor-token.js';
import { eventually } from '../helpers/eventually.js';
import { KEYS, relaySandbox, RELAY_CREDENTIALS, RELAY_SECRET, startGatewayPair, viaRelay, type GatewayPair } from '../helpers/relay-stack.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { authzClient, check, envoyCheckRequest, envoyRequestHeaders, extProcClient, json, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { rawRequest, startUpstream, text, viaProxy } from '../helpers/upstream.js';

/**
 * The hostile tenant: what a team holding its own key, or no key at all, can try against the
 * surfaces around the doors. Beside the tenant matrix (tenancy.test.ts), which covers the doors' own
 * decisions. Each block is one attack, through every door it applies to.
 */

const PEPPER = 'pepper-for-hostile-tests-0123456789abcdef012345';

/** Two teams and the admin team in a key file; returns the file, the pepper file and the keys. */
const teamKeys = () => writeApiKeyFiles(PEPPER, { admin: 'admin', 'team-a': 'team-a', 'team-b': 'team-b', revoked: 'team-a' }, ['revoked']);

describe('the operator API answers with the doors\' principals', () => {
  let t: TestGateway;
  let driver: TestDriver;
  let keys: Awaited<ReturnType<typeof teamKeys>>['keys'];
  const as = (who: keyof typeof keys | 'none'): Record<string, string> => (who === 'none' ? {} : { 'x-api-key': keys[who] });

  beforeAll(async () => {
    const k = await teamKeys();
    keys = k.keys;
    driver = new TestDriver([
      snapshot({ namespace: 'team-a', name: 'web', uid: 'a1', sessionModel: 'none' }),
      snapshot({ namespace: 'team-b', name: 'web', uid: 'b1', sessionModel: 'none', ids: ['b-secret-id'] }),
      snapshot({ namespace: 'team-b', name: 'db', uid: 'b2', sessionModel: 'none' }),
    ]);
    t = await startTestGateway([driver], { apiKeys: k.keysFile, keyPepperFile: k.pepperFile, readinessWaitMs: 0 });
  });
  afterAll(() => t.close());

  const names = async (who: keyof typeof keys | 'none', query = ''): Promise<string[]> => {
    const r = await fetch(`${t.admin}/v1/sandboxes${query}`, { headers: as(who) });
    expect(r.status).toBe(200);
    return (await json(r)).items.map((s: any) => `${s.namespace}/${s.name}`).sort();
  };

  it('list: a team sees only its namespace, the admin team everything, even when asking for another namespace', async () => {
    expect(await names('team-a')).toEqual(['team-a/web']);
    expect(await names('team-b')).toEqual(['team-b/db', 'team-b/web']);
    expect(await names('admin')).toEqual(['team-a/web', 'team-b/db', 'team-b/web']);
    expect(await names('team-a', '?namespace=team-b')).toEqual([]);
  });

  it('no key → 401 api_key_required, a revoked key → 401 api_key_invalid, on every sandbox route', async () => {
    for (const path of ['/v1/sandboxes', '/v1/sandboxes/team-b/web', '/v1/sandboxes/watch']) {
      const none = await fetch(t.admin + path);
      expect([path, none.status, (await json(none)).code]).toEqual([path, 401, 'api_key_required']);
      const revoked = await fetch(t.admin + path, { headers: as('revoked') });
      expect([path, revoked.status, (await json(revoked)).code]).toEqual([path, 401, 'api_key_invalid']);
    }
  });

  it("one sandbox: another team's answers exactly like a missing one", async () => {
    const own = await fetch(`${t.admin}/v1/sandboxes/team-a/web`, { headers: as('team-a') });
    expect(own.status).toBe(200);
    const other = await fetch(`${t.admin}/v1/sandboxes/team-b/web`, { headers: as('team-a') });
    const missing = await fetch(`${t.admin}/v1/sandboxes/team-b/nope`, { headers: as('team-a') });
    const [o, m] = [await other.text(), await missing.text()];
    expect(other.status).toBe(404);
    expect(JSON.parse(o).code).toBe('sandbox_not_found');
    // Same status, same body shape: only the echoed name differs, as it does between two missing sandboxes.
    expect(o.replace('team-b/web', 'X')).toBe(m.replace('team-b/nope', 'X'));
    expect(o).not.toContain('b-secret-id');
    const admin = await fetch(`${t.admin}/v1/sandboxes/team-b/web`, { headers: as('admin') });
    expect((await json(admin)).ids).toEqual(['b-secret-id']);
  });

  it('the watch is filtered per principal: full state and every later change', async () => {
    const res = await fetch(`${t.admin}/v1/sandboxes/watch`, { headers: as('team-a') });
    expect(res.status).toBe(200);
    const pending = readEvents(res, 4);
    // The full state was written with the response head: reset, upsert team-a/web, synced — then, after
    // team-b changes it must not see, team-a's change.
    driver.upsert(snapshot({ namespace: 'team-b', name: 'web', uid: 'b1', resourceVersion: '2', sessionModel: 'none', ids: ['b-secret-id'] }));
    driver.upsert(snapshot({ namespace: 'team-b', name: 'db', uid: 'b2', resourceVersion: '2', sessionModel: 'none' }));
    driver.upsert(snapshot({ namespace: 'team-a', name: 'web', uid: 'a1', resourceVersion: '2', sessionModel: 'none' }));
    const events = await pending;
    expect(events.map((e) => (e.event === 'upsert' ? `upsert ${e.data.namespace}/${e.data.name}` : e.event))).toEqual(['reset', 'upsert team-a/web', 'synced', 'upsert team-a/web']);
    expect(events[3]!.data.resourceVersion).toBe('2');
  });
});

describe('the decision door and the operator surface on separate listeners (--ops-port)', () => {
  let t: TestGateway;
  beforeAll(async () => {
    t = await startTestGateway([new TestDriver([snapshot({ namespace: 'team-a', name: 'web', sessionModel: 'none' })])], { opsPort: 0, opsListenHost: '127.0.0.1' });
  });
  afterAll(() => t.close());

  it('the admin port keeps /authz/ and health; the sandbox API, watch and metrics move to the ops port', async () => {
    const ops = `http://127.0.0.1:${t.gw.opsPort!}`;
    expect(t.gw.opsPort).not.toBe(t.gw.adminPort);
    for (const path of ['/v1/sandboxes', '/v1/sandboxes/team-a/web', '/v1/sandboxes/watch', '/metrics']) {
      const r = await fetch(t.admin + path);
      expect([path, r.status, (await json(r)).code]).toEqual([path, 404, 'not_found']);
    }
    expect((await fetch(`${t.admin}/healthz`)).status).toBe(200);
    expect((await fetch(`${t.admin}/readyz`)).status).toBe(200);
    const allow = await fetch(`${t.admin}/authz/`, { headers: { 'x-sandbox-namespace': 'team-a', 'x-sandbox-id': 'web' } });
    expect(allow.status).toBe(200);
    expect((await json(await fetch(`${ops}/v1/sandboxes`))).items).toHaveLength(1);
    expect((await fetch(`${ops}/metrics`)).status).toBe(200);
    expect((await fetch(`${ops}/healthz`)).status).toBe(200);
    // The door is not on the ops port.
    const door = await fetch(`${ops}/authz/`, { headers: { 'x-sandbox-namespace': 'team-a', 'x-sandbox-id': 'web' } });
    expect([door.status, (await json(door)).code]).toEqual([404, 'not_found']);
  });
});

/** A reference supervisor for `ns/name`, relaying to 127.0.0.1 inside "its sandbox"; resolves once accepted. */
async function supervisor(port: number, ns: string, name: string): Promise<SupervisorClient> {
  const token = await mintSupervisorToken(KEYS, ns, name, 3600);
  const c = new SupervisorClient({ gateway: `ws://127.0.0.1:${port}`, token, namespace: ns, name, instanceId: 'inst-1', backoff: { initialMs: 20, maxMs: 200 }, relay: {} });
  await new Promise((resolve) => c.once('accepted', resolve).start());
  return c;
}

/** The relay headers an Envoy door hands over, from an ext_authz ok_response or an ext_proc mutation. */
function headerValues(list: { header: { key: string; value?: string; raw_value?: Buffer } }[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const h of list) out[h.header.key] = h.header.raw_value !== undefined && h.header.raw_value.length > 0 ? Buffer.from(h.header.raw_value).toString('latin1') : (h.header.value ?? '');
  return out;
}

describe('the relay secret never leaves the gateway; a relay credential reaches one target, briefly', () => {
  let t: TestGateway;
  let up: Awaited<ReturnType<typeof startUpstream>>;
  let sups: SupervisorClient[];
  let keys: Awaited<ReturnType<typeof teamKeys>>['keys'];
  let authz: ReturnType<typeof authzClient>;
  let proc: ReturnType<typeof extProcClient>;
  const relayHost = (ns: string, name: string) => `${up.port}-${name}.${ns}.localhost`;
  const target = (ns: string, name: string) => `${ns}/${name}:${up.port}`;

  beforeAll(async () => {
    up = await startUpstream((_req, res) => res.end('inside the sandbox'));
    const k = await teamKeys();
    keys = k.keys;
    const box = (ns: string, name: string) => ({ ...relaySandbox(name), namespace: ns, uid: `${ns}-${name}` });
    t = await startTestGateway([new TestDriver([box('team-a', 'relaya'), box('team-b', 'relayb')])], { apiKeys: k.keysFile, keyPepperFile: k.pepperFile, relaySecret: RELAY_SECRET, readinessWaitMs: 5000 }, { supervisorKeys: KEYS });
    sups = [await supervisor(t.gw.supervisorPort!, 'team-a', 'relaya'), await supervisor(t.gw.supervisorPort!, 'team-b', 'relayb')];
    await eventually(() => t.gw.view.get('team-b', 'relayb')?.status.phase === 'Ready' && t.gw.view.get('team-a', 'relaya')?.status.phase === 'Ready', 5000, 'both relay sandboxes Ready');
    ({ authz, proc } = t.envoyClients());
  });
  afterAll(async () => {
    for (const s of sups) s.stop();
    await t.close();
    await up.close();
  });

  /** Replays a relay credential a team obtained against another team's sandbox, straight at the relay listener. */
  async function replayAgainstTeamB(credential: string): Promise<[number, string]> {
    const r = await viaRelay(t.gw.relayAddress, { headers: { host: relayHost('team-b', 'relayb'), 'x-sandgate-relay-auth': credential, 'x-sandgate-relay-target': target('team-b', 'relayb') } });
    const body = await text(r);
    return [r.status, r.status === 200 ? body : JSON.parse(body).code];
  }

  /** What each door hands team-a for its own relay sandbox: every header it sets. */
  const doors: Record<string, () => Promise<Record<string, string>>> = {
    http_authz: async () => {
      const r = await rawRequest(t.gw.adminPort, '/authz/', { host: relayHost('team-a', 'relaya'), 'x-api-key': keys['team-a']! });
      expect(r.status).toBe(200);
      return r.headers as Record<string, string>;
    },
    ext_authz: async () => {
      const r = await check(authz, envoyCheckRequest({ host: relayHost('team-a', 'relaya'), headers: { 'x-api-key': keys['team-a'] } }));
      expect(r.http_response).toBe('ok_response');
      return headerValues(r.ok_response.headers);
    },
    ext_proc: async () => {
      const s = (proc.Process as (m: Metadata) => any)(new Metadata());
      const msg = await new Promise<any>((resolve, reject) => {
        s.once('data', resolve);
        s.once('error', reject);
        s.write(envoyRequestHeaders({ ':authority': relayHost('team-a', 'relaya'), ':path': '/', ':method': 'GET', 'x-api-key': keys['team-a'] }));
      });
      s.end();
      return headerValues(msg.request_headers.response.header_mutation.set_headers);
    },
  };

  for (const [door, ask] of Object.entries(doors)) {
    it(`${door}: the answer carries a credential for team-a's own target only, never the secret; replayed at team-b it is refused`, async () => {
      const headers = await ask();
      for (const v of Object.values(headers)) expect(String(v)).not.toContain(RELAY_SECRET);
      const credential = headers['x-sandgate-relay-auth']!;
      expect(headers['x-sandgate-relay-target']).toBe(target('team-a', 'relaya'));
      expect(RELAY_CREDENTIALS.verify(credential, target('team-a', 'relaya'))).toBe('ok');
      expect(await replayAgainstTeamB(credential)).toEqual([401, 'relay_unauthorized']);
      // The legitimate use still works: the credential on its own target.
      const own = await viaRelay(t.gw.relayAddress, { headers: { host: relayHost('team-a', 'relaya'), 'x-sandgate-relay-auth': credential, 'x-sandgate-relay-target': target('team-a', 'relaya') } });
      expect([own.status, await text(own)]).toEqual([200, 'inside the sandbox']);
    });
  }

  it('relay listener: the raw secret, a forged and an expired credential are all 401 relay_unauthorized', async () => {
    expect(await replayAgainstTeamB(RELAY_SECRET)).toEqual([401, 'relay_unauthorized']);
    const forged = new RelayCredentials('another-deployments-secret-0123456789abcdef', 10_000).mint(target('team-b', 'relayb'));
    expect(await replayAgainstTeamB(forged)).toEqual([401, 'relay_unauthorized']);
    const expired = new RelayCredentials(RELAY_SECRET, 1000, () => Date.now() - 60_000).mint(target('team-b', 'relayb'));
    const r = await viaRelay(t.gw.relayAddress, { headers: { 'x-sandgate-relay-auth': expired, 'x-sandgate-relay-target': target('team-b', 'relayb') } });
    const body = JSON.parse(await text(r));
    expect([r.status, body.code]).toEqual([401, 'relay_unauthorized']);
    expect(body.message).toMatch(/expired/);
    // A fresh one for the same target is served: the refusals above are about the credential alone.
    expect(await replayAgainstTeamB(RELAY_CREDENTIALS.mint(target('team-b', 'relayb')))).toEqual([200, 'inside the sandbox']);
  });

  it('the secret appears in no log line', () => {
    expect(t.logs.raw.join('')).not.toContain(RELAY_SECRET);
  });
});

describe('owner forwarding between two gateways carries a bound credential, not the secret', () => {
  let peers: GatewayPair;
  let up: Awaited<ReturnType<typeof startUpstream>>;
  let tap: NetServer;
  const seen: Buffer[] = [];

  beforeAll(async () => {
    up = await startUpstream((_req, res) => res.end('served by B'));
    peers = await startGatewayPair(relaySandbox('box'), 'hostile-forward');
    const { a, b } = peers;
    // A wiretap between A and B's relay listener: what crosses the network between gateways.
    tap = createNetServer((client) => {
      const [host, port] = b.relayAddress.split(':');
      const peer = connect(Number(port), host);
      client.on('data', (c: Buffer) => seen.push(c));
      client.pipe(peer).pipe(client);
      client.on('error', () => peer.destroy());
      peer.on('error', () => client.destroy());
    });
    await new Promise<void>((r) => tap.listen(0, '127.0.0.1', () => r()));
    const tapped = `127.0.0.1:${(tap.address() as AddressInfo).port}`;
    a.view.setRelayResolver((id) => (id === 'gw-b' ? tapped : id === 'gw-a' ? a.relayAddress : undefined));
  });
  afterAll(async () => {
    tap.close();
    await peers.close();
    await up.close();
  });

  it("A's proxy reaches B with a credential bound to the target; B refuses it for any other target", async () => {
    const r = await viaProxy(peers.a.proxy.port, { host: `${up.port}-box.team-a.localhost`, path: '/x' });
    expect([r.status, await text(r)]).toEqual([200, 'served by B']);
    const wire = Buffer.concat(seen).toString('latin1');
    expect(wire).not.toContain(RELAY_SECRET);
    const credential = /x-sandgate-relay-auth: ([^\r]+)\r\n/i.exec(wire)![1]!;
    expect(RELAY_CREDENTIALS.verify(credential, `team-a/box:${up.port}`)).toBe('ok');
    const other = await viaRelay(peers.b.relayAddress, { headers: { 'x-sandgate-relay-auth': credential, 'x-sandgate-relay-target': `team-a/other:${up.port}` } });
    expect([other.status, JSON.parse(await text(other)).code]).toEqual([401, 'relay_unauthorized']);
  });
});

/** Sends raw bytes to a listener and reads everything until the server closes (Connection: close). */
function raw(port: number, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const sock = connect(port, '127.0.0.1');
    let got = '';
    sock.on('data', (c) => (got += c.toString('latin1')));
    sock.on('end', () => resolve(got));
    sock.on('error', reject);
    sock.write(text);
  });
}

/** Status and typed error code of a raw HTTP/1.1 answer. */
function answerOf(response: string): [number, string | undefined] {
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(response)?.[1] ?? 0);
  // The body may be chunked: the JSON object is what lies between its first and last brace.
  const body = response.slice(response.indexOf('\r\n\r\n') + 4);
  return [status, status === 200 ? undefined : (JSON.parse(body.slice(body.indexOf('{'), body.lastIndexOf('}') + 1)) as { code: string }).code];
}

describe('gateway headers, absolute-form targets and malformed requests at every door', () => {
  let t: TestGateway;
  let up: Awaited<ReturnType<typeof startUpstream>>;
  let sup: SupervisorClient;
  let authz: ReturnType<typeof authzClient>;
  let proc: ReturnType<typeof extProcClient>;
  const seen: { url: string; host: string | undefined; headers: Record<string, unknown> }[] = [];
  const webHost = (ns: string) => `${up.port}-web.${ns}.localhost`;
  const relayHost = () => `${up.port}-relaya.team-a.localhost`;
  const relayTarget = () => `team-a/relaya:${up.port}`;
  const CLIENT_GATEWAY_HEADERS = { 'x-sandgate-sandbox': 'team-b/web', 'x-sandgate-path': '/admin', 'x-sandgate-trusted-user': 'root' };
  /** HTTP authz as nginx or Envoy calls it (fetch cannot set Host). */
  const authzAnswer = (headers: Record<string, string>) => rawRequest(t.gw.adminPort, '/authz/', headers);
  const gatewayHeadersSeen = () => seen.flatMap((s) => Object.keys(s.headers).filter((k) => k.startsWith('x-sandgate-')));

  beforeAll(async () => {
    up = await startUpstream((req, res) => {
      seen.push({ url: req.url ?? '', host: req.headers.host, headers: req.headers });
      res.end('ok');
    });
    const at = { kind: 'address' as const, addresses: ['127.0.0.1'] };
    t = await startTestGateway(
      [
        new TestDriver([
          snapshot({ namespace: 'team-a', name: 'web', uid: 'a1', sessionModel: 'none', endpoint: at }),
          snapshot({ namespace: 'team-b', name: 'web', uid: 'b1', sessionModel: 'none', endpoint: at }),
          { ...relaySandbox('relaya'), uid: 'ra' },
        ]),
      ],
      { relaySecret: RELAY_SECRET, readinessWaitMs: 5000, opsPort: 0 },
      { supervisorKeys: KEYS },
    );
    sup = await supervisor(t.gw.supervisorPort!, 'team-a', 'relaya');
    await eventually(() => t.gw.view.get('team-a', 'relaya')?.status.phase === 'Ready', 5000, 'the relay sandbox Ready');
    ({ authz, proc } = t.envoyClients());
  });
  afterAll(async () => {
    sup.stop();
    await t.close();
    await up.close();
  });

  describe('every client x-sandgate-* header is stripped', () => {
    it('embedded proxy, direct and over the local relay: the sandbox sees none', async () => {
      seen.length = 0;
      for (const host of [webHost('team-a'), relayHost()]) {
        const r = await viaProxy(t.gw.proxyPort!, { host, headers: CLIENT_GATEWAY_HEADERS });
        expect([host, r.status, await text(r)]).toEqual([host, 200, 'ok']);
      }
      expect(seen).toHaveLength(2);
      expect(gatewayHeadersSeen()).toEqual([]);
    });

    it('relay listener: the sandbox sees none', async () => {
      seen.length = 0;
      const r = await viaRelay(t.gw.relayAddress, { headers: { host: relayHost(), ...CLIENT_GATEWAY_HEADERS, 'x-sandgate-relay-auth': RELAY_CREDENTIALS.mint(relayTarget()), 'x-sandgate-relay-target': relayTarget() } });
      expect([r.status, await text(r)]).toEqual([200, 'ok']);
      expect(gatewayHeadersSeen()).toEqual([]);
    });

    it('ext_authz: headers_to_remove names them all, except what the answer sets', async () => {
      const r = await check(authz, envoyCheckRequest({ host: webHost('team-a'), headers: { ...CLIENT_GATEWAY_HEADERS, 'x-sandgate-upstream': '10.9.9.9:1' } }));
      expect(r.http_response).toBe('ok_response');
      expect([...r.ok_response.headers_to_remove].sort()).toEqual(Object.keys(CLIENT_GATEWAY_HEADERS).sort());
      expect(headerValues(r.ok_response.headers)['x-sandgate-upstream']).toBe(`127.0.0.1:${up.port}`);
    });

    it('ext_proc: remove_headers names them all, except what the mutation sets', async () => {
      const s = (proc.Process as (m: Metadata) => any)(new Metadata());
      const msg = await new Promise<any>((resolve, reject) => {
        s.once('data', resolve);
        s.once('error', reject);
        s.write(envoyRequestHeaders({ ':authority': webHost('team-a'), ':path': '/', ':method': 'GET', ...CLIENT_GATEWAY_HEADERS, 'x-sandgate-upstream': '10.9.9.9:1' }));
      });
      s.end();
      const mutation = msg.request_headers.response.header_mutation;
      expect([...mutation.remove_headers].sort()).toEqual(Object.keys(CLIENT_GATEWAY_HEADERS).sort());
      expect(headerValues(mutation.set_headers)['x-sandgate-upstream']).toBe(`127.0.0.1:${up.port}`);
    });

    it('HTTP authz: x-envoy-auth-headers-to-remove names them all, except what the answer sets', async () => {
      const r = await authzAnswer({ host: webHost('team-a'), ...CLIENT_GATEWAY_HEADERS });
      expect(r.status).toBe(200);
      expect(r.headers['x-sandgate-sandbox']).toBe('team-a/web');
      expect(String(r.headers['x-envoy-auth-headers-to-remove']).split(',').sort()).toEqual(['x-sandgate-path', 'x-sandgate-trusted-user']);
    });
  });

  describe('an absolute-form target routes on its authority and is forwarded origin-form', () => {
    it('embedded proxy: same authority → routed, forwarded as /path?query', async () => {
      seen.length = 0;
      const res = await raw(t.gw.proxyPort!, `GET http://${webHost('team-a')}/abs?q=1 HTTP/1.1\r\nHost: ${webHost('team-a')}\r\nConnection: close\r\n\r\n`);
      expect(answerOf(res)).toEqual([200, undefined]);
      expect(seen.map((s) => [s.url, s.host])).toEqual([['/abs?q=1', webHost('team-a')]]);
    });

    it("embedded proxy: another sandbox's authority with this Host → 400 invalid_route, nothing forwarded", async () => {
      seen.length = 0;
      const res = await raw(t.gw.proxyPort!, `GET http://${webHost('team-b')}/ HTTP/1.1\r\nHost: ${webHost('team-a')}\r\nConnection: close\r\n\r\n`);
      expect(answerOf(res)).toEqual([400, 'invalid_route']);
      const upgrade = await raw(t.gw.proxyPort!, `GET http://${webHost('team-b')}/ HTTP/1.1\r\nHost: ${webHost('team-a')}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`);
      expect(answerOf(upgrade)).toEqual([400, 'invalid_route']);
      expect(seen).toEqual([]);
    });

    it('relay listener: forwarded origin-form', async () => {
      seen.length = 0;
      const auth = `x-sandgate-relay-auth: ${RELAY_CREDENTIALS.mint(relayTarget())}\r\nx-sandgate-relay-target: ${relayTarget()}\r\n`;
      const res = await raw(t.gw.relayPort, `GET http://${relayHost()}/abs HTTP/1.1\r\nHost: ${relayHost()}\r\n${auth}Connection: close\r\n\r\n`);
      expect(answerOf(res)).toEqual([200, undefined]);
      expect(seen.map((s) => s.url)).toEqual(['/abs']);
    });

    it("HTTP authz: an absolute X-Original-URI naming another sandbox than the Host → 400 invalid_route", async () => {
      const r = await authzAnswer({ host: webHost('team-a'), 'x-original-uri': `http://${webHost('team-b')}/` });
      expect([r.status, JSON.parse(r.body).code]).toEqual([400, 'invalid_route']);
      const same = await authzAnswer({ host: webHost('team-a'), 'x-original-uri': `http://${webHost('team-a')}/x` });
      expect([same.status, same.headers['x-sandgate-sandbox']]).toEqual([200, 'team-a/web']);
    });
  });

  describe('malformed requests get a typed answer', () => {
    it('two Host headers → 400 invalid_route at the proxy, the relay listener and HTTP authz; nothing forwarded', async () => {
      seen.length = 0;
      const twoHosts = `Host: ${webHost('team-a')}\r\nHost: ${webHost('team-b')}\r\n`;
      expect(answerOf(await raw(t.gw.proxyPort!, `GET / HTTP/1.1\r\n${twoHosts}Connection: close\r\n\r\n`))).toEqual([400, 'invalid_route']);
      const auth = `x-sandgate-relay-auth: ${RELAY_CREDENTIALS.mint(relayTarget())}\r\nx-sandgate-relay-target: ${relayTarget()}\r\n`;
      expect(answerOf(await raw(t.gw.relayPort, `GET / HTTP/1.1\r\n${twoHosts}${auth}Connection: close\r\n\r\n`))).toEqual([400, 'invalid_route']);
      expect(answerOf(await raw(t.gw.adminPort, `GET /authz/ HTTP/1.1\r\n${twoHosts}Connection: close\r\n\r\n`))).toEqual([400, 'invalid_route']);
      expect(seen).toEqual([]);
    });

    it('CONNECT → 405 method_not_allowed with the typed body on the admin and ops listeners; the proxy opens no tunnel to a host form', async () => {
      const proxy = await raw(t.gw.proxyPort!, `CONNECT ${webHost('team-a')}:443 HTTP/1.1\r\nHost: ${webHost('team-a')}:443\r\n\r\n`);
      expect(answerOf(proxy)).toEqual([404, 'sandbox_not_found']);
      for (const [listener, port] of [['admin', t.gw.adminPort], ['ops', t.gw.opsPort!]] as const) {
        const res = await raw(port, `CONNECT ${webHost('team-a')}:443 HTTP/1.1\r\nHost: ${webHost('team-a')}:443\r\n\r\n`);
        expect([listener, ...answerOf(res)]).toEqual([listener, 405, 'method_not_allowed']);
        expect(res).toMatch(/\r\nallow: /i);
      }
    });

    it('CONNECT to the relay listener without relay headers → 400 invalid_route, with a forged credential → 401 relay_unauthorized: no tunnel', async () => {
      const bare = await raw(t.gw.relayPort, `CONNECT ${webHost('team-a')}:443 HTTP/1.1\r\nHost: ${webHost('team-a')}:443\r\n\r\n`);
      expect(answerOf(bare)).toEqual([400, 'invalid_route']);
      const forged = await raw(t.gw.relayPort, `CONNECT ${webHost('team-a')}:443 HTTP/1.1\r\nHost: x\r\nx-sandgate-relay-auth: forged\r\nx-sandgate-relay-target: ${relayTarget()}\r\n\r\n`);
      expect(answerOf(forged)).toEqual([401, 'relay_unauthorized']);
      expect(seen).toEqual([]);
    });
  });
});

import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { namespaceShare } from '../../src/domain/namespace-share.js';
import type { BackendSnapshot } from '../../src/domain/sandbox.js';
import type { SupervisorClient } from '../../src/sessions/supervisor-client.js';
import { eventually } from '../helpers/eventually.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { relaySandbox, startRelayStack, startSupervisor, type RelayStack } from '../helpers/relay-stack.js';
import { cond, snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { rawRequest, startUpstream, type RawAnswer } from '../helpers/upstream.js';

/**
 * Shared resources have a share per tenant (namespace), so that one tenant's flood cannot take them all:
 * here the readiness-wait slots (`--waiters-total`, `--waiters-per-namespace`). team-a floods waits on its
 * own starting sandboxes; team-b's request for its own starting sandbox still waits, and is answered when
 * that sandbox becomes ready. The flooding tenant gets 503 `gateway_busy` past its share. And the relay
 * streams (`--relay-max-streams`, `--relay-max-streams-per-namespace`): team-a's sandboxes holding streams
 * they never answer cannot make team-b's healthy relay sandbox answer `relay_busy`.
 */

const starting = (namespace: string, name: string): BackendSnapshot =>
  snapshot({ namespace, name, uid: `${namespace}-${name}`, state: 'starting', conditions: [cond('Ready', 'False', 'Starting')], sessionModel: 'none', endpoint: { kind: 'address', addresses: ['127.0.0.1'] } });

describe('readiness waits: one tenant\'s flood leaves the others their waits', () => {
  let t: TestGateway;
  let driver: TestDriver;
  let up: Awaited<ReturnType<typeof startUpstream>>;

  beforeAll(async () => {
    up = await startUpstream((req, res) => res.end(`ok ${req.headers.host}`));
    driver = new TestDriver([...Array.from({ length: 10 }, (_, i) => starting('team-a', `a${i}`)), starting('team-b', 'web')]);
    // --waiters-per-namespace left at its default: a quarter of the total, 2 here.
    t = await startTestGateway([driver], { waitersTotal: 8, readinessWaitMs: 20_000 });
  });
  afterAll(async () => {
    await t.close();
    await up.close();
  });

  it('team-a gets its share (a quarter of --waiters-total) and 503 gateway_busy beyond it; team-b still waits and is answered', async () => {
    const proxy = t.gw.proxyPort!;
    const flood: Promise<RawAnswer | Error>[] = [];
    for (let i = 0; i < 10; i++) flood.push(rawRequest(proxy, '/', { host: `${up.port}-a${i}.team-a.localhost` }).catch((e: Error) => e));
    const refused = (await Promise.all(flood.slice(2))) as RawAnswer[];
    for (const r of refused) expect([r.status, JSON.parse(r.body).code, r.headers['retry-after']]).toEqual([503, 'gateway_busy', '1']);
    await eventually(() => t.gw.view.waiters.size === 2, 5000, 'team-a holding its two waits');

    const b = rawRequest(proxy, '/', { host: `${up.port}-web.team-b.localhost` });
    await eventually(() => t.gw.view.waiters.size === 3, 5000, "team-b's request waiting");
    driver.upsert({ ...starting('team-b', 'web'), resourceVersion: '2', state: 'ready', conditions: [cond('Ready', 'True', 'DependenciesReady')] });
    const r = await b;
    expect([r.status, r.body]).toEqual([200, `ok ${up.port}-web.team-b.localhost`]);
  });

  it('--waiters-per-namespace sets the share itself', async () => {
    const g = await startTestGateway([new TestDriver([starting('team-a', 'x'), starting('team-b', 'y')])], { waitersTotal: 100, waitersPerNamespace: 1, readinessWaitMs: 20_000 });
    try {
      const first = rawRequest(g.gw.proxyPort!, '/', { host: `${up.port}-x.team-a.localhost` }).catch((e: Error) => e);
      await eventually(() => g.gw.view.waiters.size === 1, 5000, "team-a's first wait");
      const second = await rawRequest(g.gw.proxyPort!, '/', { host: `${up.port}-x.team-a.localhost` });
      expect([second.status, JSON.parse(second.body).code]).toEqual([503, 'gateway_busy']);
      void rawRequest(g.gw.proxyPort!, '/', { host: `${up.port}-y.team-b.localhost` }).catch(() => undefined);
      await eventually(() => g.gw.view.waiters.size === 2, 5000, "team-b's wait beside team-a's");
      void first;
    } finally {
      await g.close();
    }
  });
});

describe('relay streams: one tenant\'s streams held unanswered leave the others theirs', () => {
  let g: RelayStack;
  let up: Server;
  const sups: SupervisorClient[] = [];
  const held = new Set<Socket>();

  beforeAll(async () => {
    // The sandboxes' program: `/hang` is never answered (the stream stays held), anything else is.
    up = createServer((socket) => {
      socket.on('error', () => undefined);
      socket.once('data', (d: Buffer) => {
        if (d.toString('latin1').startsWith('GET /hang ')) return void held.add(socket);
        socket.end('HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok');
      });
    });
    await new Promise<void>((r) => up.listen(0, '127.0.0.1', () => r()));
    // Without a namespace share here: the default, a quarter of the 8 streams.
    g = await startRelayStack({
      gatewayId: 'gw-a',
      sandboxes: [relaySandbox('a1'), relaySandbox('a2'), { ...relaySandbox('web'), namespace: 'team-b', uid: 'uid-b-web' }],
      limits: { maxStreams: 8, maxStreamsPerSandbox: 4, maxStreamsPerNamespace: namespaceShare(-1, 8) },
    });
    sups.push(await startSupervisor(g.supervisorUrl, 'a1'), await startSupervisor(g.supervisorUrl, 'a2'), await startSupervisor(g.supervisorUrl, 'web', undefined, undefined, 'team-b'));
  });
  afterAll(async () => {
    for (const s of held) s.destroy();
    for (const s of sups) s.stop();
    await g.close();
    await new Promise((r) => up.close(r));
  });

  const port = (): number => (up.address() as AddressInfo).port;

  it("team-a's sandboxes holding every stream they may: team-a gets relay_busy past its share, team-b's healthy sandbox is answered", async () => {
    const hanging: Promise<unknown>[] = [];
    for (const name of ['a1', 'a2']) for (let i = 0; i < 4; i++) hanging.push(rawRequest(g.proxy.port, '/hang', { host: `${port()}-${name}.team-a.localhost` }).catch(() => undefined));
    await eventually(() => held.size === 2, 5000, "team-a's share of streams held by its sandboxes");
    // Answered, not held: a request still held would hang here until the test's own timeout.
    const refused = (await Promise.all(hanging.slice(2))) as RawAnswer[];
    for (const r of refused) expect([r.status, JSON.parse(r.body).code]).toEqual([503, 'relay_busy']);
    const b = await rawRequest(g.proxy.port, '/', { host: `${port()}-web.team-b.localhost` });
    expect([b.status, b.body]).toEqual([200, 'ok']);
    expect(g.supervisors.relay.active).toBe(2);
  });
});

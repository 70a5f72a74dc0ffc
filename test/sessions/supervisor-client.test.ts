import { afterEach, describe, expect, it } from 'vitest';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { authzClient, check, envoyCheckRequest, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { backoffDelay } from '../../src/lib/backoff.js';
import { SupervisorClient, supervisorUrl } from '../../src/sessions/supervisor-client.js';
import { CLOSE } from '../../src/sessions/supervisor-protocol.js';
import { mintSupervisorToken, type SupervisorKeys } from '../../src/sessions/supervisor-token.js';

const keys: SupervisorKeys = { keys: [{ kid: 'k', secret: new TextEncoder().encode('s'.repeat(32)) }], audience: 'sandgate-supervisor' };

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

async function gateway(): Promise<TestGateway> {
  const t = await startTestGateway([new TestDriver([snapshot({ endpoint: { kind: 'address', addresses: ['127.0.0.9'] } })])], { supervisorPort: 0, readinessWaitMs: 5000 }, { supervisorKeys: keys });
  cleanup.push(() => t.close());
  return t;
}

function client(port: number, token: string, instanceId = 'i-1'): SupervisorClient {
  const c = new SupervisorClient({ gateway: `ws://127.0.0.1:${port}`, token, namespace: 'team-a', name: 'web', instanceId, backoff: { initialMs: 20, maxMs: 200 } });
  cleanup.push(() => c.stop());
  return c;
}

function once<T>(c: SupervisorClient, event: string): Promise<T> {
  return new Promise((resolve) => c.once(event, resolve));
}

describe('reference supervisor client', () => {
  it('relays only to a loopback address', () => {
    const make = (host: string) => () => new SupervisorClient({ gateway: 'ws://127.0.0.1:1', token: 't', namespace: 'team-a', name: 'web', instanceId: 'i', relay: { host } });
    for (const bad of ['10.0.0.1', 'localhost', 'example.com', '127.0.0.256', '::ffff:10.0.0.1', '']) expect(make(bad), bad).toThrow(/not a loopback address/);
    for (const good of ['127.0.0.1', '127.64.3.9', '::1']) expect(make(good), good).not.toThrow();
  });

  it('builds the endpoint URL and bounded full-jitter backoff', () => {
    expect(supervisorUrl('ws://gw:8081')).toBe('ws://gw:8081/v1/supervisor');
    expect(supervisorUrl('wss://gw/custom')).toBe('wss://gw/custom');
    expect(backoffDelay(0, { initialMs: 100, maxMs: 10_000 }, () => 0.999)).toBe(99);
    expect(backoffDelay(5, { initialMs: 100, maxMs: 10_000 }, () => 0.5)).toBe(1600);
    expect(backoffDelay(40, { initialMs: 100, maxMs: 10_000 }, () => 0.999)).toBe(9990);
  });

  it('connects, makes a supervisor-required sandbox Ready, and a waiting Check is allowed', async () => {
    const t = await gateway();
    const authz = authzClient(t.grpcTarget);
    cleanup.push(() => authz.close());
    const pending = check(authz, envoyCheckRequest({ host: '8000-web.team-a.localhost' }));
    const c = client(t.gw.supervisorPort!, await mintSupervisorToken(keys, 'team-a', 'web', 60));
    const acc = once<{ sessionId: string; epoch: number }>(c, 'accepted');
    c.start();
    expect((await acc).epoch).toBe(1);
    const res = await pending;
    expect(res.http_response).toBe('ok_response');
    const api = (await (await fetch(`${t.admin}/v1/sandboxes/team-a/web`)).json()) as any;
    expect(api.session.gatewayId).toBe('gw-test');
  });

  it('stops for good when superseded by a newer session (4000)', async () => {
    const t = await gateway();
    const token = await mintSupervisorToken(keys, 'team-a', 'web', 60);
    const a = client(t.gw.supervisorPort!, token, 'old');
    const accA = once(a, 'accepted');
    a.start();
    await accA;
    const stopped = once<{ code: number }>(a, 'stopped');
    const b = client(t.gw.supervisorPort!, token, 'new');
    b.start();
    expect((await stopped).code).toBe(CLOSE.superseded);
    expect(a.state).toBe('stopped');
  });

  it('stops on a rejected token it cannot refresh (4401)', async () => {
    const t = await gateway();
    const bad = await mintSupervisorToken({ ...keys, audience: 'nope' }, 'team-a', 'web', 60);
    const c = client(t.gw.supervisorPort!, bad);
    const stopped = once<{ code: number }>(c, 'stopped');
    c.start();
    expect((await stopped).code).toBe(CLOSE.unauthorized);
  });

  it('reconnects after a gateway restart (1012) to the new gateway on the same port', async () => {
    const t = await gateway();
    const port = t.gw.supervisorPort!;
    const c = client(port, await mintSupervisorToken(keys, 'team-a', 'web', 60));
    const first = once(c, 'accepted');
    c.start();
    await first;
    const disconnected = once<{ code: number }>(c, 'disconnected');
    await t.close();
    expect((await disconnected).code).toBe(CLOSE.serviceRestart);
    const again = once<{ epoch: number }>(c, 'accepted');
    const t2 = await startTestGateway([new TestDriver([snapshot()])], { supervisorPort: port }, { supervisorKeys: keys });
    cleanup.push(() => t2.close());
    expect((await again).epoch).toBe(1);
    expect(t2.gw.view.get('team-a', 'web')?.status.phase).toBe('Ready');
  });
});

import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SignJWT } from 'jose';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { MemoryPresence } from '../../src/sessions/presence/memory-presence.js';
import { refreshDelay, SupervisorClient, tokenExpiry } from '../../src/sessions/supervisor-client.js';
import { SupervisorKeyFile } from '../../src/sessions/supervisor-key-file.js';
import { CLOSE, SUBPROTOCOL } from '../../src/sessions/supervisor-protocol.js';
import { SupervisorServer } from '../../src/sessions/supervisor-server.js';
import { mintSupervisorToken, parseSupervisorKeys, type SupervisorKeys } from '../../src/sessions/supervisor-token.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { startTestGateway } from '../helpers/gateway.js';
import { wsMessages } from '../helpers/ws-messages.js';

/**
 * A supervisor session never outlives its token. It ends at the last heartbeat round
 * before `exp` unless a `refresh` frame (verified like the hello token) brings a newer one, and rotating a
 * signing key out of the key set closes the sessions it signed. Time is an injected clock driven by hand
 * (the server's sweep is called, not timed).
 */

const SECRET_OLD = 'o'.repeat(40);
const SECRET_NEW = 'n'.repeat(40);
const AUD = 'sandgate-supervisor';
const keysText = (kids: ('new' | 'old')[]) => `keys:\n${kids.map((k) => `  - {kid: ${k}, secret: ${k === 'new' ? SECRET_NEW : SECRET_OLD}}`).join('\n')}\n`;
const both: SupervisorKeys = { keys: parseSupervisorKeys(keysText(['new', 'old']), 'test'), audience: AUD };
const onlyNew: SupervisorKeys = { keys: parseSupervisorKeys(keysText(['new']), 'test'), audience: AUD };
const onlyOld: SupervisorKeys = { keys: parseSupervisorKeys(keysText(['old']), 'test'), audience: AUD };
const HEARTBEAT = 1000;

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

async function harness(keys: SupervisorKeys = both, heartbeatIntervalMs = HEARTBEAT) {
  const clock = { t: 1_700_000_000_000 };
  const store = new MemoryPresence('gw-a');
  const server = new SupervisorServer(
    { host: '127.0.0.1', port: 0, keys, heartbeatIntervalMs, helloTimeoutMs: 60_000, maxFrameBytes: 16_384, maxSessions: 100, maxSessionsPerSource: 100, now: () => clock.t, autoSweep: false },
    store,
    pino({ level: 'silent' }),
  );
  const port = await server.start();
  cleanup.push(() => server.close());
  return { server, store, clock, port, url: `ws://127.0.0.1:${port}/v1/supervisor` };
}

type Harness = Awaited<ReturnType<typeof harness>>;

interface Conn {
  ws: WebSocket;
  next(): Promise<any>;
  closed: Promise<{ code: number; reason: string }>;
}

function connect(url: string, token: string): Promise<Conn> {
  const ws = new WebSocket(url, [SUBPROTOCOL], { headers: { authorization: `Bearer ${token}` } });
  const received = wsMessages(ws);
  cleanup.push(() => ws.terminate());
  return new Promise((resolve, reject) => {
    ws.once('open', () => resolve({ ws, closed: received.closed, next: received.next }));
    ws.once('error', reject);
  });
}

/** A token signed by key `kid` of `keys` (default: the first) for `ns/name`, valid `ttl` seconds from the harness clock. */
function token(h: Harness, ttl: number, o: { ns?: string; name?: string; keys?: SupervisorKeys } = {}): Promise<string> {
  return mintSupervisorToken(o.keys ?? both, o.ns ?? 'team-a', o.name ?? 'web', ttl, h.clock.t);
}

async function session(h: Harness, t: string): Promise<Conn & { accepted: any }> {
  const c = await connect(h.url, t);
  c.ws.send(JSON.stringify({ type: 'hello', namespace: 'team-a', name: 'web', instanceId: 'inst-1', version: 'test/1' }));
  const accepted = await c.next();
  expect(accepted.type).toBe('accepted');
  return Object.assign(c, { accepted });
}

/** A ping answered: the gateway has heard from the supervisor at the current (fake) time. */
async function alive(c: Conn): Promise<void> {
  c.ws.send(JSON.stringify({ type: 'ping', t: 1 }));
  expect(await c.next()).toEqual({ type: 'pong', t: 1 });
}

describe('session expiry', () => {
  it('accepted carries the token expiry; the session ends with 4440 at the last heartbeat round before exp, and its presence goes', async () => {
    const h = await harness();
    const t = await token(h, 60);
    const exp = tokenExpiry(t)!;
    const c = await session(h, t);
    expect(c.accepted.expiresAt).toBe(exp);
    h.clock.t = exp - HEARTBEAT;
    await alive(c);
    h.server.sweep();
    expect(await c.next()).toMatchObject({ type: 'ping' });
    expect(h.server.size).toBe(1);
    h.clock.t = exp - HEARTBEAT + 1;
    h.server.sweep();
    expect(await c.closed).toEqual({ code: CLOSE.tokenExpired, reason: 'token expired (no refresh)' });
    expect(h.server.size).toBe(0);
    expect(h.store.get('team-a', 'web')).toBeUndefined();
  });

  it('a refresh frame extends the session to the new token\'s exp', async () => {
    const h = await harness();
    const first = await token(h, 60);
    const c = await session(h, first);
    h.clock.t += 30_000;
    const second = await token(h, 120);
    c.ws.send(JSON.stringify({ type: 'refresh', token: second }));
    const m = await c.next();
    expect(m).toEqual({ type: 'refreshed', expiresAt: tokenExpiry(second) });
    h.clock.t = tokenExpiry(first)! + 10_000;
    await alive(c);
    h.server.sweep();
    expect(await c.next()).toMatchObject({ type: 'ping' });
    expect(h.server.size).toBe(1);
    h.clock.t = tokenExpiry(second)! - 1;
    h.server.sweep();
    expect((await c.closed).code).toBe(CLOSE.tokenExpired);
  });
});

describe('refresh frame: validated exactly like the hello token', () => {
  const otherSecret: SupervisorKeys = { keys: parseSupervisorKeys(`keys:\n  - {kid: new, secret: ${'x'.repeat(40)}}\n`, 'test'), audience: AUD };
  const unknownKid: SupervisorKeys = { keys: parseSupervisorKeys(`keys:\n  - {kid: stranger, secret: ${SECRET_NEW}}\n`, 'test'), audience: AUD };
  const hostile: [string, (h: Harness) => Promise<unknown>, number, string | undefined][] = [
    ['a token for another sandbox of the same namespace', (h) => token(h, 60, { name: 'other' }), CLOSE.forbidden, 'sandbox_mismatch'],
    ['a token for the same name in another namespace', (h) => token(h, 60, { ns: 'team-b' }), CLOSE.forbidden, 'sandbox_mismatch'],
    ['an expired token', (h) => token(h, -10), CLOSE.unauthorized, 'token_expired'],
    ['a token signed with another secret under a known kid', (h) => token(h, 60, { keys: otherSecret }), CLOSE.unauthorized, 'token_invalid'],
    ['a token with an unknown kid', (h) => token(h, 60, { keys: unknownKid }), CLOSE.unauthorized, 'token_invalid'],
    ['a token for another audience', (h) => token(h, 60, { keys: { ...both, audience: 'someone-else' } }), CLOSE.unauthorized, 'token_invalid'],
    [
      'an alg:none token',
      async (h) => {
        const b64 = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url');
        return `${b64({ alg: 'none', kid: 'new' })}.${b64({ sub: 'team-a/web', aud: AUD, exp: Math.floor(h.clock.t / 1000) + 60 })}.`;
      },
      CLOSE.unauthorized,
      'token_invalid',
    ],
    ['an HS512 token', async (h) => new SignJWT({}).setProtectedHeader({ alg: 'HS512', kid: 'new' }).setSubject('team-a/web').setAudience(AUD).setExpirationTime(Math.floor(h.clock.t / 1000) + 60).sign(new TextEncoder().encode(SECRET_NEW.repeat(2))), CLOSE.unauthorized, 'token_invalid'],
    ['garbage', async () => 'not.a.jwt', CLOSE.unauthorized, 'token_invalid'],
    ['a token that is not a string', async () => 42, CLOSE.malformed, undefined],
    ['an empty token', async () => '', CLOSE.malformed, undefined],
    ['a token past 8 KiB', async () => 'a'.repeat(8193), CLOSE.malformed, undefined],
    ['a token with a control character', async () => 'a.b\u0000.c', CLOSE.malformed, undefined],
  ];

  it.each(hostile)('%s closes the session', async (_what, make, close, code) => {
    const h = await harness();
    const c = await session(h, await token(h, 60));
    c.ws.send(JSON.stringify({ type: 'refresh', token: await make(h) }));
    if (code !== undefined) expect(await c.next()).toMatchObject({ type: 'rejected', code });
    expect((await c.closed).code).toBe(close);
    expect(h.server.size).toBe(0);
  });

  it('a refresh before accepted closes with 4415 and records nothing', async () => {
    const h = await harness();
    const c = await connect(h.url, await token(h, 60));
    c.ws.send(JSON.stringify({ type: 'refresh', token: await token(h, 120) }));
    expect((await c.closed).code).toBe(CLOSE.unexpected);
    expect(h.store.get('team-a', 'web')).toBeUndefined();
  });
});

describe('key rotation', () => {
  it('removing a key closes the sessions it signed (4441) and only those; a session refreshed onto a current key stays', async () => {
    const h = await harness();
    const old = await session(h, await token(h, 3600, { keys: onlyOld }));
    const moved = await connect(h.url, await token(h, 3600, { keys: onlyOld, name: 'api' }));
    moved.ws.send(JSON.stringify({ type: 'hello', namespace: 'team-a', name: 'api', instanceId: 'inst-2', version: 'test/1' }));
    expect((await moved.next()).type).toBe('accepted');
    moved.ws.send(JSON.stringify({ type: 'refresh', token: await token(h, 3600, { name: 'api' }) }));
    expect((await moved.next()).type).toBe('refreshed');
    const current = await connect(h.url, await token(h, 3600, { name: 'db' }));
    current.ws.send(JSON.stringify({ type: 'hello', namespace: 'team-a', name: 'db', instanceId: 'inst-3', version: 'test/1' }));
    expect((await current.next()).type).toBe('accepted');

    h.server.setKeys(onlyNew);
    expect(await old.next()).toMatchObject({ type: 'rejected', code: 'signing_key_revoked' });
    expect((await old.closed).code).toBe(CLOSE.keyRevoked);
    expect(h.server.size).toBe(2);
    expect(h.server.session('team-a', 'api')).toBeDefined();
    expect(h.server.session('team-a', 'db')).toBeDefined();
    // A new connection with a token of the removed key is refused on its upgrade request.
    await expect(connect(h.url, await token(h, 3600, { keys: onlyOld }))).rejects.toThrow(/401/);
  });

  it('a key whose secret changes under the same kid closes the sessions signed with the old secret', async () => {
    const h = await harness(onlyNew);
    const c = await session(h, await token(h, 3600, { keys: onlyNew }));
    h.server.setKeys({ keys: parseSupervisorKeys(`keys:\n  - {kid: new, secret: ${'z'.repeat(40)}}\n`, 'test'), audience: AUD });
    expect((await c.closed).code).toBe(CLOSE.keyRevoked);
  });

  it('SupervisorKeyFile: a rewritten secret file replaces the keys; a broken one keeps them and is reported', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sandgate-keys-'));
    const path = join(dir, 'keys.yaml');
    writeFileSync(path, keysText(['new', 'old']));
    const changes: SupervisorKeys[] = [];
    const errors: Error[] = [];
    const file = new SupervisorKeyFile({ path, audience: AUD, initial: both, onChange: (k) => changes.push(k), onError: (e) => errors.push(e) });
    expect(await file.check()).toBe(false);
    writeFileSync(path, 'keys: [{kid: short, secret: tooshort}]\n');
    expect(await file.check()).toBe(false);
    expect(errors[0]?.message).toMatch(/at least 32 bytes.*keeping the current keys/);
    expect(errors[0]?.message).not.toContain('tooshort');
    writeFileSync(path, `keys:\n  - {kid: new, secret: ${SECRET_NEW}, : [}\n`);
    expect(await file.check()).toBe(false);
    expect(errors[1]?.message).toMatch(/does not parse.*keeping the current keys/);
    expect(errors[1]?.message).not.toContain(SECRET_NEW);
    writeFileSync(path, keysText(['new']));
    expect(await file.check()).toBe(true);
    expect(changes.map((k) => k.keys.map((x) => x.kid))).toEqual([['new']]);
    expect(file.current.keys.map((x) => x.kid)).toEqual(['new']);
  });

  it('a gateway reloads --supervisor-secret-file on its own and closes the sessions of a removed key', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sandgate-keys-'));
    const path = join(dir, 'keys.yaml');
    writeFileSync(path, keysText(['new', 'old']));
    // The shortest heartbeat the schema allows: the reload is polled once per interval.
    const t = await startTestGateway([new TestDriver([snapshot()])], { supervisorSecretFile: path, heartbeatIntervalMs: 50 });
    cleanup.push(() => t.close());
    const ws = new WebSocket(`ws://127.0.0.1:${t.gw.supervisorPort}/v1/supervisor`, [SUBPROTOCOL], {
      headers: { authorization: `Bearer ${await mintSupervisorToken(onlyOld, 'team-a', 'web', 3600)}` },
    });
    cleanup.push(() => ws.terminate());
    const closed = new Promise<number>((resolve) => ws.on('close', (code) => resolve(code)));
    ws.on('message', (d) => {
      const m = JSON.parse(d.toString());
      if (m.type === 'accepted') writeFileSync(path, keysText(['new']));
      if (m.type === 'ping') ws.send(JSON.stringify({ type: 'pong', t: m.t }));
    });
    ws.on('open', () => ws.send(JSON.stringify({ type: 'hello', namespace: 'team-a', name: 'web', instanceId: 'i', version: 'test/1' })));
    expect(await closed).toBe(CLOSE.keyRevoked);
    expect(t.logs.find((l) => l.msg === 'supervisor keys reloaded')).toMatchObject({ kids: ['new'] });
    expect(JSON.stringify(t.logs.lines)).not.toContain(SECRET_OLD);
  });
});

describe('reference client: refresh from its token source', () => {
  it.each([
    // [remaining ms, heartbeat ms, delay ms]
    [3_600_000, 5000, 2_880_000],
    [60_000, 5000, 45_000],
    [15_000, 5000, 0],
    [10_000, 5000, 0],
    [-5, 5000, 0],
  ])('refreshDelay with %i ms left and a %i ms heartbeat is %i ms', (remaining, hb, want) => {
    expect(refreshDelay(1_000_000 + remaining, 1_000_000, hb)).toBe(want);
  });

  it('re-reads its token source before expiry and refreshes over the session (no reconnect)', async () => {
    const h = await harness();
    const first = await token(h, 60);
    // Connect when only 3 heartbeats are left: the refresh is due at once.
    h.clock.t = tokenExpiry(first)! - 3 * HEARTBEAT;
    const issued = [first];
    const c = new SupervisorClient({
      gateway: h.url,
      token: async () => {
        const next = issued.length === 1 ? first : await token(h, 120);
        issued.push(next);
        return next;
      },
      namespace: 'team-a',
      name: 'web',
      instanceId: 'i-1',
      now: () => h.clock.t,
    });
    cleanup.push(() => c.stop());
    const accepted = new Promise<{ sessionId: string; expiresAt: number }>((r) => c.once('accepted', r));
    const refreshed = new Promise<{ expiresAt: number }>((r) => c.once('refreshed', r));
    c.start();
    const a = await accepted;
    expect(a.expiresAt).toBe(tokenExpiry(first));
    expect((await refreshed).expiresAt).toBe(tokenExpiry(issued[issued.length - 1]!));
    const held = h.server.session('team-a', 'web');
    expect(held?.sessionId).toBe(a.sessionId);
    expect(held?.expiresAt).toBe(tokenExpiry(issued[issued.length - 1]!));
    expect(c.state).toBe('connected');
  });

  it('a token source that fails at refresh time neither crashes the client nor ends the session', async () => {
    const h = await harness();
    const first = await token(h, 60);
    h.clock.t = tokenExpiry(first)! - 3 * HEARTBEAT;
    let calls = 0;
    let failed!: () => void;
    const failedOnce = new Promise<void>((r) => (failed = r));
    const c = new SupervisorClient({
      gateway: h.url,
      token: () => {
        if (++calls === 1) return first;
        failed();
        throw new Error('token file missing');
      },
      namespace: 'team-a',
      name: 'web',
      instanceId: 'i-1',
      now: () => h.clock.t,
    });
    cleanup.push(() => c.stop());
    c.start();
    await failedOnce;
    await new Promise((r) => setImmediate(r));
    expect(c.state).toBe('connected');
    expect(h.server.size).toBe(1);
  });

  it('concurrent refresh() calls send one refresh frame (a second would be refused with 4415)', async () => {
    const h = await harness();
    let n = 0;
    const c = new SupervisorClient({ gateway: h.url, token: () => token(h, 600 + n++), namespace: 'team-a', name: 'web', instanceId: 'i-1', now: () => h.clock.t });
    cleanup.push(() => c.stop());
    const up = new Promise((r) => c.once('accepted', r));
    c.start();
    await up;
    const refreshed = new Promise<{ expiresAt: number }>((r) => c.once('refreshed', r));
    const sent = await Promise.all([c.refresh(), c.refresh()]);
    expect(sent.filter(Boolean)).toHaveLength(1);
    await refreshed;
    expect(c.state).toBe('connected');
    expect(await c.refresh()).toBe(true);
  });

  it('after 4440 a client with a token source reconnects with a fresh token; one with a fixed token stops', async () => {
    const h = await harness();
    const fixed = new SupervisorClient({ gateway: h.url, token: await token(h, 60), namespace: 'team-a', name: 'web', instanceId: 'fixed' });
    cleanup.push(() => fixed.stop());
    const fixedUp = new Promise((r) => fixed.once('accepted', r));
    fixed.start();
    await fixedUp;
    const stopped = new Promise<{ code: number }>((r) => fixed.once('stopped', r));
    h.clock.t += 60_000;
    h.server.sweep();
    expect((await stopped).code).toBe(CLOSE.tokenExpired);

    const sourced = new SupervisorClient({ gateway: h.url, token: () => token(h, 60), namespace: 'team-a', name: 'web', instanceId: 'sourced', backoff: { initialMs: 1, maxMs: 1 }, random: () => 0 });
    cleanup.push(() => sourced.stop());
    const up = new Promise((r) => sourced.once('accepted', r));
    sourced.start();
    await up;
    const gone = new Promise<{ code: number }>((r) => sourced.once('disconnected', r));
    const again = new Promise<{ expiresAt: number }>((r) => sourced.once('accepted', (e) => r(e)));
    h.clock.t += 60_000;
    h.server.sweep();
    expect((await gone).code).toBe(CLOSE.tokenExpired);
    expect((await again).expiresAt).toBeGreaterThan(h.clock.t);
  });
});

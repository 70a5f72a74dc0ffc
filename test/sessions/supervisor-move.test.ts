import { afterEach, describe, expect, it } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import { SupervisorClient } from '../../src/sessions/supervisor-client.js';
import { CLOSE, SUBPROTOCOL } from '../../src/sessions/supervisor-protocol.js';
import { nextEvent } from '../helpers/eventually.js';

/**
 * The reference supervisor following `move`, against raw gateways that script each order of events: the
 * new session accepted before the old gateway closes the old one, the old one closed first (the old
 * gateway saw the new claim before the new `accepted` reached the supervisor), and a move that fails.
 */

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

interface RawGateway {
  readonly url: string;
  /** Sockets in the order they connected. */
  readonly sockets: WebSocket[];
  /** Resolves with the next socket's hello. */
  nextHello(): Promise<WebSocket>;
}

/** A version 2 gateway whose `accepted` the test sends (so it controls the order of events). */
async function rawGateway(opts: { refuse?: boolean } = {}): Promise<RawGateway> {
  const wss = new WebSocketServer({
    port: 0,
    host: '127.0.0.1',
    handleProtocols: (p) => (p.has(SUBPROTOCOL) ? SUBPROTOCOL : false),
    verifyClient: (_info, done) => (opts.refuse === true ? done(false, 503) : done(true)),
  });
  await new Promise((resolve) => wss.once('listening', resolve));
  cleanup.push(() => new Promise<void>((resolve) => wss.close(() => resolve())));
  const sockets: WebSocket[] = [];
  const hellos: ((ws: WebSocket) => void)[] = [];
  wss.on('connection', (ws) => {
    sockets.push(ws);
    cleanup.push(() => ws.terminate());
    ws.on('message', (d) => {
      const m = JSON.parse(d.toString()) as { type: string; t?: number };
      if (m.type === 'hello') hellos.shift()?.(ws);
      else if (m.type === 'ping') ws.send(JSON.stringify({ type: 'pong', t: m.t }));
    });
  });
  return {
    url: `ws://127.0.0.1:${(wss.address() as { port: number }).port}`,
    sockets,
    nextHello: () => new Promise((resolve) => hellos.push(resolve)),
  };
}

function accept(ws: WebSocket, sessionId: string, epoch: number): void {
  ws.send(JSON.stringify({ type: 'accepted', sessionId, epoch, heartbeatIntervalMs: 1000, maxFrameBytes: 65_536, expiresAt: Date.now() + 60_000, protocol: 2, features: ['relay', 'move'] }));
}

async function connected(x: RawGateway): Promise<{ c: SupervisorClient; old: WebSocket }> {
  const c = new SupervisorClient({ gateway: x.url, token: 'not-checked-by-raw-gateways', namespace: 'team-a', name: 'web', instanceId: 'i-1', backoff: { initialMs: 20, maxMs: 200 } });
  cleanup.push(() => c.stop());
  const hello = x.nextHello();
  c.start();
  const old = await hello;
  const acc = nextEvent(c, 'accepted');
  accept(old, 'old', 1);
  await acc;
  return { c, old };
}

describe('the reference supervisor follows move, make-before-break', () => {
  it('opens the new session first; the old gateway closing the old socket afterwards changes nothing', async () => {
    const [x, y] = [await rawGateway(), await rawGateway()];
    const { c, old } = await connected(x);
    expect(c.features).toEqual(['relay', 'move']);
    const stops: unknown[] = [];
    c.on('stopped', (e) => stops.push(e));
    const hello = y.nextHello();
    old.send(JSON.stringify({ type: 'move', reason: 'rebalance', gateway: y.url }));
    const fresh = await hello;
    // The old session is still open while the new one is being accepted.
    expect(old.readyState).toBe(WebSocket.OPEN);
    const acc = nextEvent(c, 'accepted');
    accept(fresh, 'new', 2);
    expect(await acc).toEqual([expect.objectContaining({ sessionId: 'new', epoch: 2 })]);
    const oldClosed = new Promise((resolve) => old.once('close', resolve));
    old.close(CLOSE.superseded, 'superseded by a newer session on another gateway');
    await oldClosed;
    // The supervisor answers the new gateway's pings: it is that gateway's session now.
    const pong = new Promise((resolve) => fresh.once('message', resolve));
    fresh.send(JSON.stringify({ type: 'ping', t: 3 }));
    expect(JSON.parse(String(await pong))).toEqual({ type: 'pong', t: 3 });
    expect([c.state, c.sessionId, c.epoch, stops]).toEqual(['connected', 'new', 2, []]);
  });

  it('the old gateway closes the old session (4000) before the new accepted arrives: the new one still becomes the session', async () => {
    const [x, y] = [await rawGateway(), await rawGateway()];
    const { c, old } = await connected(x);
    const hello = y.nextHello();
    old.send(JSON.stringify({ type: 'move', reason: 'rebalance', gateway: y.url }));
    const fresh = await hello;
    const disconnected = nextEvent(c, 'disconnected');
    old.close(CLOSE.superseded, 'superseded by a newer session on another gateway');
    expect(await disconnected).toEqual([{ code: CLOSE.superseded, reason: 'superseded by a newer session on another gateway' }]);
    const acc = nextEvent(c, 'accepted');
    accept(fresh, 'new', 2);
    await acc;
    expect([c.state, c.sessionId, c.epoch]).toEqual(['connected', 'new', 2]);
  });

  it('a move whose new session fails leaves the old session as it was', async () => {
    const x = await rawGateway();
    const refusing = await rawGateway({ refuse: true });
    const { c, old } = await connected(x);
    const failed = nextEvent(c, 'moveFailed');
    old.send(JSON.stringify({ type: 'move', reason: 'drain', gateway: refusing.url }));
    await failed;
    const pong = new Promise((resolve) => old.once('message', resolve));
    old.send(JSON.stringify({ type: 'ping', t: 4 }));
    expect(JSON.parse(String(await pong))).toEqual({ type: 'pong', t: 4 });
    expect([c.state, c.sessionId, x.sockets.length]).toEqual(['connected', 'old', 1]);
  });
});

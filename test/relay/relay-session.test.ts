import { afterEach, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { encodeData, encodeOpen, encodeOpenOk, FRAME } from '../../src/sessions/relay-frames.js';
import { CLOSE } from '../../src/sessions/supervisor-protocol.js';
import type { SupervisorClient } from '../../src/sessions/supervisor-client.js';
import { eventually } from '../helpers/eventually.js';
import { relaySandbox, silentSupervisor, startRelayStack, startSupervisor, type RelayStack } from '../helpers/relay-stack.js';
import { patternStream, sha256Of, startUpstream, text, viaProxy } from '../helpers/upstream.js';

// Relay frames on the supervisor session itself: legal only after accepted, and a supervisor that
// breaks the relay protocol loses its session (and only its session).

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

async function stack(maxFrameBytes?: number): Promise<RelayStack> {
  const g = await startRelayStack({ gatewayId: 'gw-a', sandboxes: [relaySandbox('box')], maxFrameBytes });
  cleanup.push(() => g.close());
  return g;
}

async function silent(g: RelayStack): Promise<{ ws: WebSocket; closed: Promise<number>; frames: Buffer[] }> {
  const ws = await silentSupervisor(g.supervisorUrl, 'box');
  cleanup.push(() => ws.terminate());
  const frames: Buffer[] = [];
  ws.on('message', (m, isBinary) => {
    if (isBinary) frames.push(m as Buffer);
  });
  return { ws, frames, closed: new Promise((resolve) => ws.once('close', resolve)) };
}

describe('relay frames on the supervisor session', () => {
  it('the gateway opens a stream with OPEN {port, window}; a supervisor answering OPEN_OK gets the request bytes', async () => {
    const g = await stack();
    const s = await silent(g);
    const pending = viaProxy(g.proxy.port, { host: '8080-box.team-a.localhost', path: '/raw' });
    await eventually(() => s.frames.length > 0, 5000, 'the OPEN frame');
    const open = s.frames[0]!;
    expect([open[0], open.readUInt32BE(1), open.readUInt16BE(5), open.readUInt32BE(7)]).toEqual([FRAME.open, 1, 8080, 256 * 1024]);
    s.ws.send(encodeOpenOk(1, 65_536));
    await eventually(() => s.frames.some((f) => f[0] === FRAME.data), 5000, 'the request bytes');
    const request = Buffer.concat(s.frames.filter((f) => f[0] === FRAME.data).map((f) => f.subarray(5))).toString();
    expect(request).toMatch(/^GET \/raw HTTP\/1\.1\r\n/);
    s.ws.send(encodeData(1, Buffer.from('HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhello')));
    const r = await pending;
    expect([r.status, await text(r)]).toEqual([200, 'hello']);
  });

  it('a supervisor sending OPEN is closed with 4415; a malformed relay frame with 4400', async () => {
    const g = await stack();
    const a = await silent(g);
    a.ws.send(encodeOpen(1, 80, 1024));
    expect(await a.closed).toBe(CLOSE.unexpected);
    const b = await silent(g);
    b.ws.send(Buffer.from([FRAME.window, 0, 0]));
    expect(await b.closed).toBe(CLOSE.malformed);
    await eventually(() => g.view.get('team-a', 'box')?.status.phase !== 'Ready', 5000, 'presence to be removed');
  });

  it('a gateway with a small frame limit still carries large bodies: the supervisor cuts DATA to fit', async () => {
    const g = await stack(4096);
    const up = await startUpstream((req, res) => {
      if (req.url === '/hash') return void sha256Of(req).then((r) => res.end(JSON.stringify(r)));
      res.writeHead(200);
      patternStream(3 * 1024 * 1024).pipe(res);
    });
    cleanup.push(() => up.close());
    const sup: SupervisorClient = await startSupervisor(g.supervisorUrl, 'box');
    cleanup.push(() => sup.stop());
    const host = `${up.port}-box.team-a.localhost`;
    const down = await viaProxy(g.proxy.port, { host, path: '/download' });
    expect(await sha256Of(down.res)).toEqual(await sha256Of(patternStream(3 * 1024 * 1024)));
    const upload = await viaProxy(g.proxy.port, { host, path: '/hash', method: 'POST', body: patternStream(3 * 1024 * 1024) });
    expect(JSON.parse(await text(upload))).toEqual(await sha256Of(patternStream(3 * 1024 * 1024)));
    expect(g.supervisors.closes.get(String(CLOSE.tooBig))).toBeUndefined();
  });
});

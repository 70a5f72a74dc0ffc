import { once } from 'node:events';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { writeApiKeyFiles } from '../helpers/api-key-files.js';
import { eventually } from '../helpers/eventually.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { startEcho, startFirehose, firehoseBlocked } from '../helpers/tunnel-client.js';

/**
 * The WebSocket tunnel at the embedded proxy: `GET /v1/sandboxes/{namespace}/{name}/ports/{port}/tunnel`,
 * binary messages carrying a TCP echo server's bytes; refusals are plain typed HTTP answers before the
 * handshake; a client that never reads holds the sandbox side back.
 */

const PEPPER = 'pepper-for-ws-tunnel-tests-0123456789abcdef01234';

describe('the WebSocket tunnel', () => {
  let t: TestGateway;
  let echo: Awaited<ReturnType<typeof startEcho>>;
  let firehose: Awaited<ReturnType<typeof startFirehose>>;
  let keys: Record<'team-a' | 'team-b', string>;

  beforeAll(async () => {
    echo = await startEcho();
    firehose = await startFirehose();
    const k = await writeApiKeyFiles(PEPPER, { 'team-a': 'team-a', 'team-b': 'team-b' });
    keys = k.keys;
    const box = { sessionModel: 'none' as const, endpoint: { kind: 'address' as const, addresses: ['127.0.0.1'] } };
    t = await startTestGateway(
      [
        new TestDriver([
          snapshot({ name: 'web', uid: 'a1', ...box, ports: [echo.port, 8000, firehose.port], tcpPorts: [echo.port, firehose.port] }),
          snapshot({ namespace: 'team-b', name: 'db', uid: 'b1', ...box, ports: [echo.port], tcpPorts: [echo.port] }),
        ]),
      ],
      { apiKeys: k.keysFile, keyPepperFile: k.pepperFile, readinessWaitMs: 0 },
    );
  });
  afterAll(async () => {
    await t.close();
    echo.server.close();
    firehose.server.close();
  });

  const url = (ns: string, name: string, port: number | string) => `ws://127.0.0.1:${t.gw.proxyPort}/v1/sandboxes/${ns}/${name}/ports/${port}/tunnel`;

  /** The refusal a handshake gets: its status and typed code, or 101. */
  async function handshake(u: string, headers: Record<string, string> = {}): Promise<{ status: number; code?: string; ws?: WebSocket }> {
    const ws = new WebSocket(u, { headers });
    return new Promise((resolve, reject) => {
      ws.once('open', () => resolve({ status: 101, ws }));
      ws.once('unexpected-response', (_req, res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.once('end', () => resolve({ status: res.statusCode ?? 0, code: (JSON.parse(body) as { code: string }).code }));
      });
      ws.once('error', reject);
    });
  }

  it('carries the bytes both ways in binary messages', async () => {
    const { ws } = await handshake(url('team-a', 'web', echo.port), { 'x-api-key': keys['team-a'] });
    const got: Buffer[] = [];
    ws!.on('message', (m: Buffer) => got.push(m));
    ws!.send(Buffer.from('hello '));
    ws!.send(Buffer.from('over a websocket'));
    await eventually(() => Buffer.concat(got).toString() === 'hello over a websocket', 5000, () => `the echo (got ${Buffer.concat(got).toString()})`);
    ws!.close();
    await once(ws!, 'close');
  });

  it.each([
    ['no credential', 'team-a', 'web', 'echo', {}, 401, 'api_key_required'],
    ["another tenant's sandbox", 'team-b', 'db', 'echo', 'team-a', 404, 'sandbox_not_found'],
    ['a missing sandbox', 'team-b', 'nope', 'echo', 'team-a', 404, 'sandbox_not_found'],
    ['a port not declared TCP', 'team-a', 'web', '8000', 'team-a', 409, 'port_not_tcp'],
    ['a name that is no DNS label', 'team-a', 'we.b', 'echo', 'team-a', 404, 'sandbox_not_found'],
    ['a port that is no port', 'team-a', 'web', '0', 'team-a', 404, 'sandbox_not_found'],
  ] as const)('%s: %i %s before the handshake, nothing dialled', async (_n, ns, name, port, who, status, code) => {
    const before = echo.accepted();
    const headers: Record<string, string> = who === 'team-a' ? { 'x-api-key': keys['team-a'] } : {};
    const r = await handshake(url(ns, name, port === 'echo' ? echo.port : port), headers);
    expect([r.status, r.code]).toEqual([status, code]);
    expect(echo.accepted()).toBe(before);
  });

  it('a client that never reads holds the sandbox side back', async () => {
    const { ws } = await handshake(url('team-a', 'web', firehose.port), { 'x-api-key': keys['team-a'] });
    // Stop reading the socket under the WebSocket: nothing more is taken off the wire.
    (ws as unknown as { _socket: { pause(): void } })._socket.pause();
    await firehoseBlocked(firehose);
    expect(firehose.written()).toBeLessThan(64 * 1024 * 1024);
    ws!.terminate();
  });
});

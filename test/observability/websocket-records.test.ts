import { mkdtempSync, readFileSync } from 'node:fs';
import { connect as h2Connect, type ClientHttp2Session, type ClientHttp2Stream, type IncomingHttpHeaders } from 'node:http2';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import { ACCESS_LOG_SCHEMA } from '../../src/observability/access-log.js';
import { eventually } from '../helpers/eventually.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../helpers/otlp-receiver.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { makeCa, needsOpenssl, OPENSSL, type TestCa } from '../helpers/tls-certs.js';
import { startUpstream } from '../helpers/upstream.js';
import { maskedText, serverFrames } from '../helpers/ws-frames.js';

/**
 * WebSockets in the access log and in traces, over both protocols of the proxy's TLS port: an HTTP/1.1
 * upgrade and an HTTP/2 extended CONNECT stream (RFC 8441, a node:http2 client) each make one access-log
 * line and one server span with an upstream child, with the same fields — the method and status the
 * client saw (`GET` 101, `CONNECT` 200), the sandbox, the upstream host, the bytes. A CONNECT that is no
 * WebSocket is recorded with its denial. Traces go to a real OTLP receiver.
 */

const DOMAIN = 'sandboxes.test';
const ajv = new Ajv2020({ allErrors: true, strict: true, strictTypes: false });
(addFormats as unknown as (a: Ajv2020) => void)(ajv);
const validate = ajv.compile(ACCESS_LOG_SCHEMA);

type Line = Record<string, any>;

describe.skipIf(!OPENSSL)(needsOpenssl('WebSockets over HTTP/1.1 and HTTP/2 in the access log and traces'), () => {
  let ca: TestCa;
  let receiver: OtlpReceiver;
  let up: Awaited<ReturnType<typeof startUpstream>>;
  let wss: WebSocketServer;
  let t: TestGateway;
  let lines: Line[];
  let spans: ReceivedSpan[];
  const h2Sent = maskedText('ping over h2');
  let h2Received = 0;

  beforeAll(async () => {
    ca = makeCa();
    const leaf = ca.issue('wild', [`*.team-a.${DOMAIN}`]);
    receiver = await startOtlpReceiver();
    up = await startUpstream((_req, res) => res.end('not a websocket'));
    wss = new WebSocketServer({ server: up.server });
    wss.on('connection', (ws) => ws.on('message', (m) => ws.send(`echo ${String(m)}`)));
    const file = join(mkdtempSync(join(tmpdir(), 'sandgate-ws-log-')), 'access.log');
    const sandbox = { sessionModel: 'none' as const, endpoint: { kind: 'address' as const, addresses: ['127.0.0.1'] } };
    t = await startTestGateway([new TestDriver([snapshot({ name: 'web', ...sandbox })])], { baseDomain: DOMAIN, proxyTlsPort: 0, tlsCertFile: leaf.certFile, tlsKeyFile: leaf.keyFile, accessLog: file, otelExporterOtlpEndpoint: receiver.url });
    const host = `${up.port}-web.team-a.${DOMAIN}`;

    // HTTP/1.1: an upgrade on the TLS port, one message each way.
    const ws = new WebSocket(`wss://127.0.0.1:${t.gw.proxyTlsPort}/h1?x=1`, { ca: readFileSync(ca.caFile), servername: host, headers: { host } } as WebSocket.ClientOptions);
    await new Promise((resolve, reject) => ws.once('open', resolve).once('error', reject));
    ws.send('ping over h1');
    expect(String(await new Promise((resolve) => ws.once('message', resolve)))).toBe('echo ping over h1');
    ws.close();
    await new Promise((resolve) => ws.once('close', resolve));

    // HTTP/2: extended CONNECT, one message each way, then END_STREAM.
    const s = await h2Session(t.gw.proxyTlsPort!, host, readFileSync(ca.caFile));
    try {
      const stream = s.request({ ':method': 'CONNECT', ':protocol': 'websocket', ':scheme': 'https', ':path': '/h2?y=2', ':authority': host, 'sec-websocket-version': '13' }, { endStream: false });
      const head = await new Promise<IncomingHttpHeaders>((resolve) => stream.once('response', resolve));
      expect(head[':status']).toBe(200);
      const frames = serverFrames(stream);
      stream.write(h2Sent);
      expect(await frames.next()).toBe('echo ping over h2');
      h2Received = frames.bytes;
      await endStream(stream);
      // A CONNECT that asks for no WebSocket (hostile: a tunnel) is refused, and recorded.
      const other = s.request({ ':method': 'CONNECT', ':protocol': 'smtp', ':scheme': 'https', ':path': '/', ':authority': host }, { endStream: false });
      expect((await new Promise<IncomingHttpHeaders>((resolve) => other.once('response', resolve)))[':status']).toBe(405);
      await endStream(other);
    } finally {
      s.close();
    }
    await eventually(() => readFileSync(file, 'utf8').split('\n').filter((l) => l.includes('"door":"proxy"')).length >= 3, 10_000, 'three proxy lines');
    // Closing the gateway flushes the log and exports the spans the batch processor holds.
    await t.close();
    lines = readFileSync(file, 'utf8').split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as Line);
    spans = await eventually(() => (receiver.spans.filter((x) => x.attributes['sandgate.door'] === 'proxy').length >= 3 ? receiver.spans : undefined), 10_000, 'three proxy spans');
  }, 60_000);

  afterAll(async () => {
    wss?.close();
    await up?.close();
    await receiver?.close();
    ca?.remove();
  });

  const line = (path: string): Line => lines.find((l) => l.door === 'proxy' && l.path === path)!;

  it('each WebSocket makes one access-log line with the same fields: GET 101 over HTTP/1.1, CONNECT 200 over HTTP/2', () => {
    for (const l of lines) expect(validate(l), JSON.stringify(validate.errors)).toBe(true);
    const common = { door: 'proxy', namespace: 'team-a', name: 'web', port: up.port, response_code_details: 'ok', upstream_host: `127.0.0.1:${up.port}` };
    expect(line('/h1')).toMatchObject({ ...common, method: 'GET', response_code: 101 });
    expect(line('/h2')).toMatchObject({ ...common, method: 'CONNECT', response_code: 200 });
    expect(lines.filter((l) => l.path === '/h1' || l.path === '/h2')).toHaveLength(2);
    // HTTP/1.1 counts the connection (handshake included); HTTP/2 the stream's DATA: the frames exactly.
    expect(line('/h1').bytes_received).toBeGreaterThan(0);
    expect(line('/h1').bytes_sent).toBeGreaterThan(0);
    expect([line('/h2').bytes_received, line('/h2').bytes_sent]).toEqual([h2Sent.length, h2Received]);
  });

  it('a CONNECT that is no WebSocket is recorded with its denial', () => {
    expect(line('/')).toMatchObject({ method: 'CONNECT', response_code: 405, response_code_details: 'method_not_allowed' });
  });

  it('each WebSocket makes a server span with an upstream child, over both protocols', () => {
    for (const [method, path, status] of [['GET', '/h1', 101], ['CONNECT', '/h2', 200]] as const) {
      const server = spans.find((s) => s.attributes['sandgate.door'] === 'proxy' && s.attributes['url.path'] === path)!;
      expect(server, path).toMatchObject({ name: method, kind: 2 });
      expect(server.attributes).toMatchObject({ 'http.request.method': method, 'http.response.status_code': status, 'sandgate.sandbox.name': 'web', 'sandgate.decision.code': 'ok' });
      const upstream = spans.find((s) => s.parentSpanId === server.spanId && s.name === 'sandgate.upstream');
      // The sandbox answered 101 both times; over HTTP/2 the client's stream got 200.
      expect(upstream, path).toMatchObject({ kind: 3, attributes: { 'server.port': up.port, 'http.response.status_code': 101 } });
    }
  });
});

function h2Session(port: number, host: string, ca: Buffer): Promise<ClientHttp2Session> {
  return new Promise((resolve, reject) => {
    const s = h2Connect(`https://127.0.0.1:${port}`, { ca, servername: host });
    s.once('remoteSettings', () => resolve(s));
    s.once('error', reject);
  });
}

/** Closes the stream (RST_STREAM NO_ERROR, as a client leaving does) and waits for it to close. */
function endStream(stream: ClientHttp2Stream): Promise<void> {
  stream.close();
  return new Promise((resolve) => stream.once('close', () => resolve()));
}

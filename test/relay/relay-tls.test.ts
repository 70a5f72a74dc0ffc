import { readFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { connect as tlsConnect } from 'node:tls';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket, { WebSocketServer } from 'ws';
import type { Allow } from '../../src/domain/decide.js';
import { EmbeddedProxy } from '../../src/edge/proxy/http-proxy.js';
import { relayHeaders } from '../../src/edge/relay/relay-headers.js';
import type { ServerTls } from '../../src/lib/http-listen.js';
import type { CertificateSet } from '../../src/lib/tls/certificate-store.js';
import { PeerTls } from '../../src/lib/tls/peer-tls.js';
import { relaySandbox, RELAY_CREDENTIALS, startGatewayPair, type GatewayPair, type RelayStack } from '../helpers/relay-stack.js';
import { certificatePairs, makeCa, needsOpenssl, OPENSSL, type TestCa } from '../helpers/tls-certs.js';
import { patternStream, sha256Of, startUpstream, text, viaProxy } from '../helpers/upstream.js';

// Two gateways sharing presence through a real redis-server, their relay listeners over mutual TLS with
// the doors pair: the supervisor holds its session on B, A's embedded proxy forwards to B's listener over
// TLS, presenting its own doors pair, and checks B's against the CA. The gateways' certificates name no
// IP address: with a private CA the peer is checked by its chain, not by the address in its lease.

let ca: TestCa;
let stranger: TestCa;
let peers: GatewayPair;
let a: RelayStack;
let b: RelayStack;
let aStore: CertificateSet;
let bStore: CertificateSet;
let up: Awaited<ReturnType<typeof startUpstream>>;
let wss: WebSocketServer;
let reached = 0;

const host = () => `${up.port}-box.team-a.localhost`;
const serverTls = (store: CertificateSet): ServerTls => ({ options: store.serverOptions(), attach: (s) => store.attach(s) });

/** A gateway's doors pair (server and client use), in its own directory so it can be rotated in place. */
function doorsPair(issuer: TestCa, file: string): { certFile: string; keyFile: string } {
  return issuer.issue(file, ['sandgate.internal'], { both: true });
}

/** An embedded proxy deciding with A's view whose peer TLS is `peer`, for one request. */
async function withPeerProxy<T>(peer: PeerTls, use: (port: number) => Promise<T>): Promise<T> {
  const p = new EmbeddedProxy(
    a.decider,
    { host: '127.0.0.1', port: 0, upstreamHeader: 'x-sandgate-upstream', stripHeaders: [], stripOriginOnUpgrade: false, connectTimeoutMs: 2000, headersTimeoutMs: 2000, idleTimeoutMs: 2000, relay: { gatewayId: 'gw-a', credentials: RELAY_CREDENTIALS, streams: a.supervisors, peerTls: peer } },
    pino({ level: 'silent' }),
  );
  await p.start();
  try {
    return await use(p.port);
  } finally {
    await p.close(100);
  }
}

/** Opens a WebSocket through a proxy and echoes one message; the error's message when it fails. */
async function echo(proxyPort: number): Promise<string> {
  const ws = new WebSocket(`ws://127.0.0.1:${proxyPort}/ws`, { headers: { host: host() } });
  try {
    await new Promise((resolve, reject) => {
      ws.once('open', resolve);
      ws.once('error', reject);
    });
    const got = new Promise<string>((resolve) => ws.once('message', (m) => resolve(String(m))));
    ws.send('ping over mtls');
    return await got;
  } catch (err) {
    return (err as Error).message;
  } finally {
    ws.terminate();
  }
}

/** A request straight to B's relay listener with live relay headers, over TLS with `client` (or plain); the status, or how it was refused. */
function toRelay(tls: { cert?: Buffer; key?: Buffer } | 'plain'): Promise<string> {
  const d = a.decider.decide('ext_authz', { headers: {}, host: host(), path: '/direct' }) as Allow;
  const [h, port] = b.relayAddress.split(':');
  const headers = { host: host(), ...Object.fromEntries(relayHeaders(d, RELAY_CREDENTIALS)) };
  return new Promise((resolve) => {
    const opts = { host: h, port: Number(port), path: '/direct', headers };
    const done = (res: { statusCode?: number; resume(): void }) => {
      res.resume();
      resolve(String(res.statusCode));
    };
    const r = tls === 'plain' ? httpRequest(opts, done) : httpsRequest({ ...opts, ca: readFileSync(ca.caFile), servername: 'sandgate.internal', ...tls }, done);
    r.on('error', (err) => resolve(`refused ${(err as NodeJS.ErrnoException).code ?? err.message}`));
    r.end();
  });
}

describe.skipIf(!OPENSSL)(needsOpenssl('the relay between two gateways over mutual TLS'), () => {
  beforeAll(async () => {
    ca = makeCa('sandgate doors CA');
    stranger = makeCa('another CA');
    const clientCa = readFileSync(ca.caFile);
    aStore = certificatePairs(doorsPair(ca, 'gw-a'), { clientCa });
    bStore = certificatePairs(doorsPair(ca, 'gw-b'), { clientCa });
    up = await startUpstream((req, res) => {
      reached++;
      if (req.url === '/hash') return void sha256Of(req).then((r) => res.end(JSON.stringify(r)));
      res.end('ok ' + req.url);
    });
    wss = new WebSocketServer({ server: up.server });
    wss.on('connection', (ws) => ws.on('message', (m, isBinary) => ws.send(m, { binary: isBinary })));
    const storeOf = (gatewayId: string): CertificateSet => (gatewayId === 'gw-a' ? aStore : bStore);
    peers = await startGatewayPair(relaySandbox('box'), 'relay-tls', (id) => ({ tls: { listener: serverTls(storeOf(id)), peer: new PeerTls(storeOf(id)) } }));
    ({ a, b } = peers);
  }, 60_000);

  afterAll(async () => {
    wss?.close();
    await peers?.close();
    await up?.close();
    aStore?.detachAll();
    bStore?.detachAll();
    ca?.remove();
    stranger?.remove();
  });

  it("A's proxy forwards to B's relay listener over mutual TLS: a request, an 8 MiB upload, a WebSocket", async () => {
    const small = await viaProxy(a.proxy.port, { host: host(), path: '/small' });
    expect([small.status, await text(small)]).toEqual([200, 'ok /small']);
    const want = await sha256Of(patternStream(8 * 1024 * 1024));
    const upload = await viaProxy(a.proxy.port, { host: host(), path: '/hash', method: 'POST', body: patternStream(8 * 1024 * 1024) });
    expect(JSON.parse(await text(upload))).toEqual(want);
    expect(await echo(a.proxy.port)).toBe('ping over mtls');
    // The streams rode B's session: A forwarded, it did not relay locally.
    expect(a.supervisors.relay.active).toBe(0);
  });

  it("B's relay listener refuses at the handshake a client without a certificate, one from another CA, and plain HTTP (hostile); a CA client is served", async () => {
    const before = reached;
    const foreign = stranger.issue('intruder', ['intruder.internal'], { client: true });
    expect(await toRelay({})).toMatch(/^refused/);
    expect(await toRelay({ cert: foreign.cert, key: foreign.key })).toMatch(/^refused/);
    expect(await toRelay('plain')).toMatch(/^refused/);
    expect(reached).toBe(before);
    const own = ca.issue('envoy', ['envoy.internal'], { client: true });
    expect(await toRelay({ cert: own.cert, key: own.key })).toBe('200');
    expect(reached).toBe(before + 1);
  });

  it('a peer whose pair another CA issued is refused by B, and a peer that does not trust B\'s CA refuses B: 502, the sandbox never reached', async () => {
    const before = reached;
    const intruderStore = certificatePairs(doorsPair(stranger, 'intruder-gw'), { clientCa: readFileSync(ca.caFile) });
    const distrustStore = certificatePairs(doorsPair(ca, 'distrusting-gw'), { clientCa: readFileSync(stranger.caFile) });
    try {
      for (const store of [intruderStore, distrustStore]) {
        await withPeerProxy(new PeerTls(store), async (port) => {
          const r = await viaProxy(port, { host: host(), path: '/refused' });
          expect(r.status).toBe(502);
          // The peer's TLS alert (upstream_error), or a reset that overtakes it when the request was
          // already written behind a TLS 1.3 handshake the client saw complete (sandbox_unreachable).
          expect(['upstream_error', 'sandbox_unreachable']).toContain(JSON.parse(await text(r)).code);
          expect(await echo(port)).toMatch(/502/);
        });
      }
    } finally {
      intruderStore.detachAll();
      distrustStore.detachAll();
    }
    expect(reached).toBe(before);
  });

  it("a rotated pair is presented from A's next connection, and B serves its rotated certificate to the next client", async () => {
    const served = (): Promise<string> =>
      new Promise((resolve, reject) => {
        const [h, port] = b.relayAddress.split(':');
        const own = ca.issue('probe', ['probe.internal'], { client: true });
        const s = tlsConnect({ host: h, port: Number(port), ca: readFileSync(ca.caFile), servername: 'sandgate.internal', cert: own.cert, key: own.key }, () => {
          resolve(s.getPeerCertificate().serialNumber);
          s.end();
        });
        s.once('error', reject);
      });
    const bBefore = await served();
    doorsPair(ca, 'gw-b');
    bStore.reload();
    expect(await served()).not.toBe(bBefore);
    // A's pair replaced by one another CA issued: B refuses A's next connection; a new CA pair is accepted.
    rotateTo(aStore, stranger, 'gw-a');
    expect(await echo(a.proxy.port)).toMatch(/502/);
    rotateTo(aStore, ca, 'gw-a');
    expect(await echo(a.proxy.port)).toBe('ping over mtls');
  });
});

/** Rewrites the store's pair files with a new pair `issuer` issues, and re-reads them. */
function rotateTo(store: CertificateSet, issuer: TestCa, file: string): void {
  const from = store.from as { certFile: string; keyFile: string };
  const dir = from.certFile.slice(0, from.certFile.lastIndexOf('/'));
  issuer.issue(file, ['sandgate.internal'], { both: true, outDir: dir });
  store.reload();
}

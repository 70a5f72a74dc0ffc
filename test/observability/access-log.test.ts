import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Metadata } from '@grpc/grpc-js';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FileApiKeyStore } from '../../src/auth/api-key-file-store.js';
import { newApiKey } from '../../src/auth/api-keys.js';
import { relayHeaders } from '../../src/edge/relay/relay-headers.js';
import { ACCESS_LOG_SCHEMA, accessLogLine } from '../../src/observability/access-log.js';
import { ExchangeRecorder, type Exchange } from '../../src/observability/exchange.js';
import type { SupervisorClient } from '../../src/sessions/supervisor-client.js';
import { eventually } from '../helpers/eventually.js';
import { authzClient, check, envoyCheckRequest, envoyRequestHeaders, extProcClient, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { relaySandbox, RELAY_CREDENTIALS, startRelayStack, startSupervisor, viaRelay, type RelayStack } from '../helpers/relay-stack.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { rawRequest, startUpstream, text, viaProxy } from '../helpers/upstream.js';

/**
 * The access log against its documented schema (ACCESS_LOG_SCHEMA, docs/operations.md): a gateway with
 * `--access-log FILE` takes allowed, denied, waited and failed requests at every door, and every line it
 * wrote parses, matches the schema, and says what happened — and none carries an API key, a traffic
 * token, a link token or a query string.
 */

const ajv = new Ajv2020({ allErrors: true, strict: true, strictTypes: false });
(addFormats as unknown as (a: Ajv2020) => void)(ajv);
const validate = ajv.compile(ACCESS_LOG_SCHEMA);

type Line = Record<string, any>;

function checked(raw: string): Line[] {
  return raw
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => {
      const line = JSON.parse(l) as Line;
      expect(validate(line), JSON.stringify(validate.errors)).toBe(true);
      return line;
    });
}

const PEPPER = 'p'.repeat(40);
const TOKEN = 'traffic-token-0123456789abcdef';
const LINK_TOKEN = 'link-token-should-never-be-logged';

/** A port nothing listens on. */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  const port = (s.address() as AddressInfo).port;
  await new Promise((r) => s.close(r));
  return port;
}

describe('access log: every door, every outcome, one line each, matching the schema', () => {
  let t: TestGateway;
  let upstream: Awaited<ReturnType<typeof startUpstream>>;
  let dead: number;
  let key: string;
  let lines: Line[];
  let raw: string;
  let driver: TestDriver;
  const at = { kind: 'address' as const, addresses: ['127.0.0.1'] };
  const later = snapshot({ name: 'later', uid: 'l1', sessionModel: 'none', endpoint: at, state: 'starting', conditions: [] });

  beforeAll(async () => {
    upstream = await startUpstream((req, res) => {
      req.resume();
      req.on('end', () => res.end('hello from the sandbox'));
    });
    dead = await closedPort();
    const dir = mkdtempSync(join(tmpdir(), 'sandgate-access-'));
    writeFileSync(join(dir, 'pepper'), PEPPER);
    const store = new FileApiKeyStore(join(dir, 'keys.yaml'));
    const made = newApiKey(new TextEncoder().encode(PEPPER), 'team-a');
    await store.add(made.record);
    key = made.key;
    const file = join(dir, 'access.log');
    driver = new TestDriver([
      snapshot({ name: 'web', uid: 'w1', sessionModel: 'none', endpoint: at, accessToken: TOKEN }),
      snapshot({ name: 'dead', uid: 'd1', sessionModel: 'none', endpoint: at }),
      snapshot({ name: 'stuck', uid: 's1', sessionModel: 'none', endpoint: at, state: 'starting', conditions: [] }),
      later,
    ]);
    t = await startTestGateway([driver], { apiKeys: join(dir, 'keys.yaml'), keyPepperFile: join(dir, 'pepper'), readinessWaitMs: 1500, accessLog: file });
    const authz = authzClient(t.grpcTarget);
    const proc = extProcClient(t.grpcTarget);
    const creds = { 'x-api-key': key, 'e2b-traffic-access-token': TOKEN, 'x-request-id': 'rid-1', traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' };
    const hostOf = (name: string, port = upstream.port) => `${port}-${name}.team-a.localhost`;
    const target = `/files?sandgate_token=${LINK_TOKEN}&q=1`;

    const viaExtAuthz = (host: string, h: Record<string, string>) => check(authz, envoyCheckRequest({ host, path: target, headers: h }));
    const viaExtProc = async (host: string, h: Record<string, string>) => {
      const s = (proc.Process as (m: Metadata) => any)(new Metadata());
      const msg = await new Promise<unknown>((resolve, reject) => {
        s.once('data', resolve);
        s.once('error', reject);
        s.write(envoyRequestHeaders({ ':authority': host, ':path': target, ':method': 'GET', 'x-forwarded-for': '198.51.100.9', ...h }));
      });
      s.end();
      return msg;
    };
    const viaHttpAuthz = (host: string, h: Record<string, string>) => rawRequest(t.gw.adminPort, '/authz' + target, { ...h, host });
    const viaEmbedded = async (host: string, h: Record<string, string>) => text(await viaProxy(t.gw.proxyPort!, { host, path: target, headers: h }));
    const doors = [viaExtAuthz, viaExtProc, viaHttpAuthz, viaEmbedded];

    for (const door of doors) {
      await door(hostOf('web'), creds); // allowed
      await door(hostOf('web'), { 'e2b-traffic-access-token': TOKEN }); // denied: no API key
      await door(hostOf('dead', dead), creds); // the proxy fails to reach it; the authz doors allow it
    }
    // Waited: every door waits on `later` until it becomes ready; failed: `stuck` never does.
    const waited = Promise.all(doors.map((door) => door(hostOf('later'), creds)));
    const stuck = Promise.all(doors.map((door) => door(hostOf('stuck'), creds)));
    await eventually(() => t.gw.view.waiters.size === 8, 5000, 'eight waiting requests');
    driver.upsert({ ...later, resourceVersion: '2', state: 'ready', conditions: [{ type: 'Ready', status: 'True', reason: 'DependenciesReady', message: '' }] });
    await Promise.all([waited, stuck]);
    // A body through the proxy, and the relay listener refusing a request without a relay credential.
    const posted = await viaProxy(t.gw.proxyPort!, { host: hostOf('web'), method: 'POST', path: '/upload', headers: creds, body: Buffer.alloc(1000, 1) });
    await text(posted);
    await rawRequest(t.gw.relayPort, '/x?secret=1', { host: 'anything', 'x-sandgate-relay-target': 'team-a/web:80' });
    authz.close();
    proc.close();
    await t.close();
    raw = readFileSync(file, 'utf8');
    lines = checked(raw);
  }, 30_000);

  afterAll(async () => {
    await upstream.close();
  });

  const find = (door: string, name: string, code?: string) => lines.filter((l) => l.door === door && l.name === name && (code === undefined || l.response_code_details === code));

  it('one line per request at each door, each matching the schema', () => {
    // 5 requests per authz door and 6 at the proxy (the POST), plus the relay listener's refusal.
    for (const door of ['ext_authz', 'ext_proc', 'http_authz']) expect(lines.filter((l) => l.door === door), door).toHaveLength(5);
    expect(lines.filter((l) => l.door === 'proxy')).toHaveLength(6);
    expect(lines.filter((l) => l.door === 'relay')).toHaveLength(1);
  });

  it('allowed: tenant, sandbox, 200 ok, the path without its query, the request and trace ids', () => {
    for (const door of ['ext_authz', 'ext_proc', 'http_authz', 'proxy']) {
      const [l] = find(door, 'web', 'ok').filter((x) => x.method === 'GET');
      expect(l, door).toMatchObject({ tenant: 'team-a', namespace: 'team-a', port: upstream.port, path: '/files', response_code: 200, gateway_id: 'gw-test', x_request_id: 'rid-1', trace_id: '0af7651916cd43dd8448eb211c80319c' });
    }
    const proxied = find('proxy', 'web', 'ok').find((x) => x.method === 'GET')!;
    expect(proxied).toMatchObject({ upstream_host: `127.0.0.1:${upstream.port}`, bytes_sent: 'hello from the sandbox'.length, wait_duration: null, downstream_remote_address: '127.0.0.1' });
    expect(proxied.upstream_service_time).toBeGreaterThanOrEqual(0);
    expect(find('ext_authz', 'web', 'ok')[0]!.downstream_remote_address).toBe('203.0.113.7:54321');
    expect(find('ext_proc', 'web', 'ok')[0]!.downstream_remote_address).toBe('198.51.100.9');
  });

  it('denied: the denial code and status, anonymous tenant, the denial body counted', () => {
    for (const door of ['ext_authz', 'ext_proc', 'http_authz', 'proxy']) {
      const [l] = find(door, 'web', 'api_key_required');
      expect(l, door).toMatchObject({ tenant: 'anonymous', namespace: 'team-a', response_code: 401 });
      expect(l!.bytes_sent, door).toBeGreaterThan(0);
    }
  });

  it('waited: the wait is timed and the request allowed; stuck: the wait runs out', () => {
    for (const door of ['ext_authz', 'ext_proc', 'http_authz', 'proxy']) {
      const [ok] = find(door, 'later', 'ok');
      expect(ok!.wait_duration, door).toBeGreaterThan(0);
      expect(ok!.response_code, door).toBe(200);
      const [late] = find(door, 'stuck');
      expect(late, door).toMatchObject({ response_code_details: 'sandbox_not_ready', response_code: 503 });
      expect(late!.wait_duration, door).toBeGreaterThan(0);
    }
  });

  it('failed: the proxy logs the upstream failure; bytes in are counted on a body', () => {
    const [l] = find('proxy', 'dead');
    expect(l!.response_code).toBeGreaterThanOrEqual(502);
    expect(l!.response_code_details).not.toBe('ok');
    expect(l!.upstream_host).toBe(`127.0.0.1:${dead}`);
    const post = lines.find((x) => x.door === 'proxy' && x.method === 'POST')!;
    expect(post).toMatchObject({ path: '/upload', bytes_received: 1000, response_code: 200 });
  });

  it('the relay listener logs its refusal, with no tenant', () => {
    expect(lines.find((l) => l.door === 'relay')).toMatchObject({ tenant: null, response_code: 401, response_code_details: 'relay_unauthorized', path: '/x' });
  });

  it('no line carries an API key, a traffic token, a link token or a query string', () => {
    for (const secret of [key, TOKEN, LINK_TOKEN, 'q=1', 'secret=1']) expect(raw).not.toContain(secret);
    for (const l of lines) expect(l.path).not.toContain('?');
  });
});

describe('access log at the relay listener: a request carried over a supervisor session', () => {
  const written: Exchange[] = [];
  let g: RelayStack;
  let sup: SupervisorClient;
  let up: Awaited<ReturnType<typeof startUpstream>>;

  beforeAll(async () => {
    up = await startUpstream((req, res) => res.end('relayed ' + req.url));
    g = await startRelayStack({ gatewayId: 'gw-a', sandboxes: [relaySandbox('box')], recorder: new ExchangeRecorder([{ write: (x: Exchange) => written.push(x) }], undefined) });
    sup = await startSupervisor(g.supervisorUrl, 'box');
    await eventually(() => g.decider.decide('ext_authz', { headers: {}, host: `${up.port}-box.team-a.localhost`, path: '/' }).allow);
  });
  afterAll(async () => {
    await sup.stop();
    await g.close();
    await up.close();
  });

  it('logs the relayed exchange with its target, status and bytes', async () => {
    const host = `${up.port}-box.team-a.localhost`;
    const d = g.decider.decide('ext_authz', { headers: {}, host, path: '/r' });
    if (!d.allow) throw new Error(d.code);
    const r = await viaRelay(d.upstream, { path: `/r?sandgate_token=${LINK_TOKEN}`, headers: { host, ...Object.fromEntries(relayHeaders(d, RELAY_CREDENTIALS)) } });
    expect(await text(r)).toContain('relayed /r');
    const x = await eventually(() => written.find((w) => w.door === 'relay'));
    const line = accessLogLine(x, 'gw-a');
    expect(validate(line), JSON.stringify(validate.errors)).toBe(true);
    expect(line).toMatchObject({ namespace: 'team-a', name: 'box', port: up.port, path: '/r', response_code: 200, response_code_details: 'ok', upstream_host: `relay:team-a/box:${up.port}` });
    expect(line.bytes_sent).toBe(`relayed /r?sandgate_token=${LINK_TOKEN}`.length);
    expect(JSON.stringify(line)).not.toContain(LINK_TOKEN);
  });
});

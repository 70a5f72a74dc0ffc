import { fork, execFileSync, type ChildProcess } from 'node:child_process';
import { createHash, randomInt } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TLSSocket } from 'node:tls';
import type { BackendSnapshot } from '../../src/domain/sandbox.js';
import { SupervisorClient } from '../../src/sessions/supervisor-client.js';
import { mintSupervisorToken, type SupervisorKeys } from '../../src/sessions/supervisor-token.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { startUpstream } from '../helpers/upstream.js';
import { startEnvd, type EnvdStandIn } from './envd-stand-in.js';

/**
 * One self-hosted E2B-style platform in front of sandgate, for the real E2B SDK: a control API
 * (`POST /v2/sandboxes/{id}/connect`), sandboxes whose envd is the Connect stand-in, a gateway started
 * like the other tests', and — for host mode, which the SDK speaks only over HTTPS — a TLS ingress
 * with a wildcard certificate from a test CA, reached through the SDK's `proxy` option (a CONNECT
 * proxy takes the place of wildcard DNS, which a test cannot set up).
 */

export const DOMAIN = 'sandgate.test';
export const API_KEY = 'e2b_team_key_for_tests_0123456789';
export const ENVD_TOKEN = 'envd-access-token-3f9c';
export const TRAFFIC_TOKEN = 'traffic-access-token-8a1d';
export const ENVD_PORT = 49983;
export const USER_PORT = 3000;
const KEYS: SupervisorKeys = { keys: [{ kid: 'k', secret: new TextEncoder().encode('e'.repeat(32)) }], audience: 'sandgate-supervisor' };

export type Path = 'proxy' | 'relay';
export type Mode = 'sandbox-url' | 'host';

/** A loopback address of this run's own, so envd can listen on its real port 49983 beside other runs. */
function loopbackHost(): string {
  return `127.${randomInt(64, 128)}.${randomInt(0, 256)}.${randomInt(1, 255)}`;
}

/** What the control API knows (and the SDK gets from connect) for each sandbox id. */
interface Known {
  readonly envdAccessToken: string;
  readonly trafficAccessToken?: string;
}

async function startControlApi(known: Record<string, Known>): Promise<{ url: string; address: string; close(): Promise<void> }> {
  const up = await startUpstream((req, res) => {
    const m = /^\/v2\/sandboxes\/([^/]+)\/connect$/.exec(req.url ?? '');
    const reply = (status: number, body: unknown): void => void res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    req.resume();
    if (req.headers['x-api-key'] !== API_KEY) return reply(401, { code: 401, message: 'invalid API key' });
    if (req.method !== 'POST' || m === null) return reply(404, { code: 404, message: 'not found' });
    const k = known[m[1]!];
    if (k === undefined) return reply(404, { code: 404, message: `sandbox ${m[1]} not found` });
    return reply(200, { sandboxID: m[1], templateID: 'base', clientID: 'sandgate', envdVersion: '0.5.7', envdAccessToken: k.envdAccessToken, trafficAccessToken: k.trafficAccessToken ?? null, domain: DOMAIN });
  });
  return { url: `http://127.0.0.1:${up.port}`, address: `127.0.0.1:${up.port}`, close: up.close };
}

interface Tls {
  readonly dir: string;
  readonly caFile: string;
  readonly key: Buffer;
  readonly cert: Buffer;
}

/** A test CA and a `*.sandgate.test` certificate it signs (openssl, short-lived, in a temp dir). */
function makeTls(): Tls {
  const dir = mkdtempSync(join(tmpdir(), 'sandgate-e2b-'));
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  const run = (args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  run(['req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=sandgate e2b test CA']);
  run(['req', ...ec, '-keyout', 'srv.key', '-out', 'srv.csr', '-subj', `/CN=*.${DOMAIN}`]);
  writeFileSync(join(dir, 'ext.cnf'), `subjectAltName=DNS:*.${DOMAIN}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n`);
  run(['x509', '-req', '-in', 'srv.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'srv.pem', '-days', '2', '-extfile', 'ext.cnf']);
  return { dir, caFile: join(dir, 'ca.pem'), key: readFileSync(join(dir, 'srv.key')), cert: readFileSync(join(dir, 'srv.pem')) };
}

function splice(a: Socket, b: Socket): void {
  a.pipe(b).pipe(a);
  a.on('error', () => b.destroy());
  b.on('error', () => a.destroy());
  a.on('close', () => b.destroy());
  b.on('close', () => a.destroy());
}

/**
 * The ingress the SDK's `proxy` option points at: `CONNECT <anything>.sandgate.test:443` is answered,
 * TLS is terminated there (as a load balancer would) and the plaintext goes to sandgate's proxy port;
 * `CONNECT` to the control API is tunnelled as is. Anything else is refused.
 */
async function startIngress(tls: Tls, gatewayPort: number, apiAddress: string): Promise<{ url: string; close(): Promise<void> }> {
  const server: Server = createServer((_req, res) => res.writeHead(405).end());
  server.on('connect', (req, socket: Socket, head: Buffer) => {
    const target = req.url ?? '';
    if (head.length > 0) socket.unshift(head);
    if (target.endsWith(`.${DOMAIN}:443`)) {
      socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      const clear = new TLSSocket(socket, { isServer: true, key: tls.key, cert: tls.cert, ALPNProtocols: ['http/1.1'] });
      splice(clear, connect(gatewayPort, '127.0.0.1'));
    } else if (target === apiAddress) {
      socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      const [h, p] = apiAddress.split(':');
      splice(socket, connect(Number(p), h));
    } else {
      socket.end('HTTP/1.1 403 Forbidden\r\n\r\n');
    }
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

export interface SdkError {
  readonly name: string;
  readonly className: string;
  readonly message: string;
  readonly exitCode?: number;
  readonly stdout?: string;
  readonly stderr?: string;
}

/** The SDK in a child process (test/e2b/sdk-client.mjs), called op by op. */
export class SdkClient {
  private next = 0;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: unknown) => void; onEvent?: (e: any) => void }>();

  private constructor(private readonly child: ChildProcess) {
    child.on('message', (m: any) => {
      const p = this.pending.get(m.id);
      if (p === undefined) return;
      if (m.event !== undefined) return p.onEvent?.(m.event);
      this.pending.delete(m.id);
      if (m.error !== undefined) p.reject(m.error);
      else p.resolve(m.value);
    });
  }

  static async start(env: Record<string, string>): Promise<SdkClient> {
    const child = fork(new URL('./sdk-client.mjs', import.meta.url), [], { env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    await new Promise<void>((resolve, reject) => {
      child.once('message', () => resolve());
      child.once('exit', (code) => reject(new Error(`sdk client exited with ${code}`)));
    });
    return new SdkClient(child);
  }

  call<T = any>(op: string, args: Record<string, unknown>, onEvent?: (e: any) => void): Promise<T> {
    const id = this.next++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject, onEvent });
      this.child.send({ id, op, args });
    });
  }

  /** The SDK error an op fails with (fails the test if it succeeds). */
  async error(op: string, args: Record<string, unknown>): Promise<SdkError> {
    try {
      await this.call(op, args);
    } catch (err) {
      return err as SdkError;
    }
    throw new Error(`${op} succeeded, an error was expected`);
  }

  close(): void {
    this.child.kill();
  }
}

export interface E2bWorld {
  readonly path: Path;
  readonly gateway: TestGateway;
  readonly envd: EnvdStandIn;
  /** Headers the user app on USER_PORT received, newest last. */
  readonly userSeen: Record<string, string | string[] | undefined>[];
  readonly sdk: Record<Mode, SdkClient>;
  close(): Promise<void>;
}

/**
 * Ids: live (both tokens known), badtoken (the driver knows envd's token, the control API hands out
 * another), envdonly (the driver does not know envd's token, the control API hands out a wrong one),
 * paused, ghost (known to the control API, unknown to sandgate).
 */
export async function startE2bWorld(path: Path, gatewayOverrides: Record<string, unknown> = {}): Promise<E2bWorld> {
  const host = loopbackHost();
  const closers: (() => Promise<void> | void)[] = [];
  try {
    const envd = await startEnvd(host, ENVD_PORT, ENVD_TOKEN);
    closers.push(() => envd.close());
    const userSeen: E2bWorld['userSeen'] = [];
    const app = await startUserApp(host, userSeen);
    closers.push(() => app.close());
    const endpoint: BackendSnapshot['endpoint'] = path === 'proxy' ? { kind: 'address', addresses: [host] } : { kind: 'relay' };
    const sessionModel = path === 'proxy' ? 'none' : 'required';
    const sandbox = (name: string, over: Partial<BackendSnapshot> = {}) =>
      snapshot({ namespace: 'team-a', name, uid: `uid-${name}`, ids: [`sbx-${name}`], endpoint, sessionModel, accessToken: TRAFFIC_TOKEN, envdAccessToken: ENVD_TOKEN, ...over });
    const driver = new TestDriver([
      sandbox('live'),
      sandbox('badtoken'),
      // A sandbox whose driver does not know envd's token: envd alone judges X-Access-Token.
      sandbox('envdonly', { envdAccessToken: undefined }),
      sandbox('paused', { state: 'paused', sessionModel: 'none' }),
    ]);
    const gateway = await startTestGateway([driver], { baseDomain: DOMAIN, supervisorPort: 0, readinessWaitMs: 2000, logLevel: 'info', ...gatewayOverrides }, { supervisorKeys: KEYS });
    closers.push(() => gateway.close());
    if (path === 'relay') {
      for (const name of ['live', 'badtoken', 'envdonly']) {
        const token = await mintSupervisorToken(KEYS, 'team-a', name, 3600);
        const sup = new SupervisorClient({ gateway: `ws://127.0.0.1:${gateway.gw.supervisorPort}`, token, namespace: 'team-a', name, instanceId: 'inst-1', backoff: { initialMs: 20, maxMs: 200 }, relay: { host } });
        closers.push(() => sup.stop());
        await new Promise((resolve) => sup.once('accepted', resolve).start());
      }
    }
    const api = await startControlApi({
      'sbx-live': { envdAccessToken: ENVD_TOKEN, trafficAccessToken: TRAFFIC_TOKEN },
      'sbx-badtoken': { envdAccessToken: 'not-the-envd-token' },
      'sbx-envdonly': { envdAccessToken: 'wrong-for-envd' },
      'sbx-paused': { envdAccessToken: ENVD_TOKEN },
      'sbx-ghost': { envdAccessToken: ENVD_TOKEN },
    });
    closers.push(() => api.close());
    const tls = makeTls();
    closers.push(() => rmSync(tls.dir, { recursive: true, force: true }));
    const ingress = await startIngress(tls, gateway.gw.proxyPort!, api.address);
    closers.push(() => ingress.close());
    const base = { E2B_API_URL: api.url, E2B_API_KEY: API_KEY };
    const sdk = {
      'sandbox-url': await SdkClient.start({ ...base, E2B_SANDBOX_URL: `http://127.0.0.1:${gateway.gw.proxyPort}` }),
      host: await SdkClient.start({ ...base, E2B_DOMAIN: DOMAIN, E2B_TEST_PROXY: ingress.url, NODE_EXTRA_CA_CERTS: tls.caFile }),
    };
    closers.push(() => sdk['sandbox-url'].close(), () => sdk.host.close());
    return {
      path,
      gateway,
      envd,
      userSeen,
      sdk,
      async close() {
        for (const c of closers.splice(0).reverse()) await c();
      },
    };
  } catch (err) {
    for (const c of closers.splice(0).reverse()) await c();
    throw err;
  }
}

/** The sandbox's own app on USER_PORT: answers who it is and records what reached it. */
async function startUserApp(host: string, seen: E2bWorld['userSeen']): Promise<{ close(): Promise<void> }> {
  const server = createServer((req, res) => {
    seen.push({ ...req.headers });
    req.resume();
    res.writeHead(200, { 'content-type': 'text/plain' }).end(`hello from ${req.url}`);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(USER_PORT, host, () => resolve());
  });
  return {
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/** The bytes sdk-client.mjs writes for `size` (same generator), hashed. */
export function patternSha256(size: number): string {
  const buf = Buffer.allocUnsafe(size);
  let seed = 0x2545f491;
  for (let i = 0; i < size; i++) {
    seed = (seed * 1103515245 + 12345) >>> 0;
    buf[i] = seed >>> 24;
  }
  return createHash('sha256').update(buf).digest('hex');
}

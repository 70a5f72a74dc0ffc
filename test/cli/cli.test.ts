import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { FileApiKeyStore } from '../../src/auth/api-key-file-store.js';
import { newApiKey } from '../../src/auth/api-keys.js';
import { ed25519Pem, writeLinkKeys } from '../helpers/link-keys.js';
import { rawRequest } from '../helpers/upstream.js';
import { mintSupervisorToken, type SupervisorKeys } from '../../src/sessions/supervisor-token.js';
import { startTestGateway } from '../helpers/gateway.js';
import { clusterFiles, onLogLines } from '../helpers/gateway-process.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { freePort } from '../helpers/redis-server.js';

const CLI = fileURLToPath(new URL('../../dist/src/cli/main.js', import.meta.url));
const run = promisify(execFile);

/** Starts `sandgate serve ARGS` and resolves with its log lines once it logged `until`. */
function serve(args: string[], until: (line: Record<string, unknown>) => boolean) {
  const proc = spawn(process.execPath, [CLI, 'serve', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  const lines: Record<string, unknown>[] = [];
  const exited = new Promise<number | null>((r) => proc.once('exit', (code) => r(code)));
  const ready = new Promise<void>((resolve, reject) => {
    onLogLines(proc.stdout, (line) => {
      lines.push(line);
      if (until(line)) resolve();
    });
    void exited.then((code) => reject(new Error(`exited with ${code}`)));
    // Generous: two workers start one after the other, slowly on a loaded machine.
    setTimeout(() => reject(new Error('did not start')), 60_000).unref();
  });
  return { proc, lines, ready, exited };
}

function get(port: number, host: string, path = '/'): ReturnType<typeof rawRequest> {
  return rawRequest(port, path, { host });
}

describe('sandgate serve', () => {
  it("the demo (npm start): the README's curls route through the proxy and HTTP authz, and the supervised sandbox becomes Ready", async () => {
    const [admin, proxy] = [await freePort(), await freePort()];
    const g = serve(['--admin-port', String(admin), '--proxy-port', String(proxy), '--grpc-port', '0', '--supervisor-port', '0', '--relay-port', '0', '--listen-host', '127.0.0.1'], (l) => l.msg === 'supervisor session accepted');
    try {
      await g.ready;
      const viaProxy = await get(proxy, '8000-web.team-a.localhost:8080', '/hello');
      expect(JSON.parse(viaProxy.body)).toMatchObject({ sandbox: 'team-a/web', upstream: '127.0.0.2:8000', path: '/hello' });
      const byId = await get(proxy, '8000-sbx-web-123.localhost');
      expect(JSON.parse(byId.body)).toMatchObject({ sandbox: 'team-a/web' });
      const paused = await get(proxy, '8000-sleepy.team-b.localhost');
      expect([paused.status, JSON.parse(paused.body).code]).toEqual([409, 'sandbox_paused']);
      // The sandbox with a 30 s idle timeout (test/lifecycle/demo-lifecycle.test.ts pauses and wakes it).
      const napper = JSON.parse((await get(proxy, '8000-napper.team-b.localhost')).body);
      expect(napper).toMatchObject({ sandbox: 'team-b/napper', upstream: '127.0.0.6:8000' });
      expect(JSON.parse((await get(admin, 'x', '/v1/sandboxes/team-b/napper')).body).idle).toMatchObject({ timeoutMs: 30_000 });
      const decision = await get(admin, '8000-web.team-a.localhost', '/authz/');
      expect(decision.status).toBe(200);
      const notebook = JSON.parse((await get(admin, 'x', '/v1/sandboxes/team-a/notebook')).body);
      expect(notebook).toMatchObject({ phase: 'Ready', session: { instanceId: 'demo-notebook' } });
      // The README's one URL to open after npm start: the console, and its static table.
      expect((await get(admin, 'x', '/console')).status).toBe(200);
      expect((await get(admin, 'x', '/console/table')).body).toContain('<td>notebook</td>');
      expect((await get(proxy, '8888-notebook.team-a.localhost')).status).toBe(200);
    } finally {
      g.proc.kill('SIGTERM');
      expect(await g.exited).toBe(0);
    }
  });

  it('--workers 2 --gateway-id g: two gateway processes g-w1 and g-w2 share the listeners; SIGTERM stops all', { timeout: 90_000 }, async () => {
    const admin = await freePort();
    const files = clusterFiles('sandboxes:\n  - {namespace: a, name: web, address: 127.0.0.2, supervisor: none}\n');
    let started = 0;
    const g = serve(['--workers', '2', '--gateway-id', 'g', '--sandboxes', files.sandboxes, '--admin-port', String(admin), '--grpc-port', '0', '--proxy-port', '0', '--relay-port', '0', '--listen-host', '127.0.0.1'], (l) => l.msg === 'sandgate started' && ++started === 2);
    try {
      await g.ready;
      const ids = new Set<string>();
      for (let i = 0; i < 50 && ids.size < 2; i++) ids.add(JSON.parse((await get(admin, 'x', '/v1/sandboxes')).body).gatewayId as string);
      // The program's per-worker id wins over the flag: distinct ids in presence leases (docs/configuration.md).
      expect([...ids].sort()).toEqual(['g-w1', 'g-w2']);
    } finally {
      g.proc.kill('SIGTERM');
      expect(await g.exited).toBe(0);
    }
    expect(g.lines.filter((l) => l.msg === 'sandgate stopped')).toHaveLength(2);
  });

  it('rejects what cannot work with a clear error and exit code 2', { timeout: 90_000 }, async () => {
    const files = clusterFiles('sandboxes: []\n');
    await expect(run(process.execPath, [CLI, 'serve', '--workers', '2'])).rejects.toMatchObject({ code: 2, stderr: expect.stringContaining('needs a driver') });
    await expect(run(process.execPath, [CLI, 'serve', '--workers', '2', '--sandboxes', files.sandboxes, '--supervisor-secret-file', files.secret])).rejects.toMatchObject({
      code: 2,
      stderr: expect.stringContaining('--presence redis://'),
    });
    await expect(run(process.execPath, [CLI, 'serve', '--grpc-prot', '1'])).rejects.toMatchObject({ code: 2, stderr: expect.stringContaining('did you mean --grpc-port') });
    await expect(run(process.execPath, [CLI, 'serve', '--h2c-max-streams-per-session', '0'])).rejects.toMatchObject({
      code: 2,
      stderr: expect.stringContaining('--h2c-max-streams-per-session: must be between 1 and 1000000'),
    });
    await expect(run(process.execPath, [CLI, 'frobnicate'])).rejects.toMatchObject({ code: 2 });
  });

  it('sandgate token mints a token the supervisor protocol accepts (sub, aud, kid)', async () => {
    const files = clusterFiles('sandboxes: []\n');
    const { stdout } = await run(process.execPath, [CLI, 'token', '--namespace', 'team-a', '--name', 'web', '--ttl', '1h', '--supervisor-secret-file', files.secret]);
    const [header, payload] = stdout.trim().split('.').slice(0, 2).map((p) => JSON.parse(Buffer.from(p, 'base64url').toString()));
    expect(header).toMatchObject({ alg: 'HS256', kid: 'default' });
    expect(payload).toMatchObject({ sub: 'team-a/web', aud: 'sandgate-supervisor' });
    expect(payload.exp - payload.iat).toBe(3600);
    const longer = await run(process.execPath, [CLI, 'token', '--namespace', 'team-a', '--name', 'web', '--ttl', '1h30m', '--supervisor-secret-file', files.secret]);
    const claims = JSON.parse(Buffer.from(longer.stdout.trim().split('.')[1]!, 'base64url').toString()) as { exp: number; iat: number };
    expect(claims.exp - claims.iat).toBe(5400);
  });
});

describe('sandgate link', () => {
  it('takes the key from SANDGATE_API_KEY and a --ttl in the one duration grammar (1h30m); refuses 1.5h', { timeout: 90_000 }, async () => {
    const PEPPER = 'p'.repeat(32);
    const dir = mkdtempSync(join(tmpdir(), 'sandgate-link-cli-'));
    await writeLinkKeys(join(dir, 'links.yaml'), [{ kid: 'k1', privateKey: ed25519Pem().privateKey }]);
    const store = new FileApiKeyStore(join(dir, 'keys.yaml'));
    const admin = newApiKey(new TextEncoder().encode(PEPPER), 'admin');
    await store.add(admin.record);
    const t = await startTestGateway([new TestDriver([snapshot({ name: 'web', sessionModel: 'none', endpoint: { kind: 'address', addresses: ['127.0.0.1'] } })])], {
      linkKeysFile: join(dir, 'links.yaml'),
      linkScheme: 'http',
      apiKeys: join(dir, 'keys.yaml'),
      keyPepper: PEPPER,
    });
    const link = (ttl: string) => run(process.execPath, [CLI, 'link', '--namespace', 'team-a', '--name', 'web', '--port', '3000', '--ttl', ttl, '--api-url', t.admin], { env: { ...process.env, SANDGATE_API_KEY: admin.key } });
    try {
      const { stdout } = await link('1h30m');
      const token = new URL(stdout.trim()).searchParams.get('sandgate_token')!;
      const claims = JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()) as { exp: number; iat: number };
      expect(claims.exp - claims.iat).toBe(5400);
      await expect(link('1.5h')).rejects.toMatchObject({ code: 2, stderr: expect.stringContaining('--ttl: "1.5h" is not a duration') });
    } finally {
      await t.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('sandgate supervisor --token-file', () => {
  const keys: SupervisorKeys = { keys: [{ kid: 'k', secret: new TextEncoder().encode('s'.repeat(32)) }], audience: 'sandgate-supervisor' };

  it('refuses --token with --token-file, and an unreadable token file', async () => {
    await expect(run(process.execPath, [CLI, 'supervisor', '--gateway', 'ws://127.0.0.1:1', '--token', 'a.b.c', '--token-file', '/nonexistent'])).rejects.toMatchObject({
      code: 2,
      stderr: expect.stringContaining('--token and --token-file exclude each other'),
    });
    await expect(run(process.execPath, [CLI, 'supervisor', '--gateway', 'ws://127.0.0.1:1', '--token-file', '/nonexistent/token'])).rejects.toMatchObject({
      code: 2,
      stderr: expect.stringContaining('cannot read --token-file /nonexistent/token'),
    });
  });

  // The refresh ahead of expiry is the client's (test/sessions/token-lifetime.test.ts, on a fake clock); here
  // SIGHUP asks for it at once, so the test does not wait for a real token to near its expiry.
  it('re-reads the file on SIGHUP and refreshes over the same session', async () => {
    const t = await startTestGateway([new TestDriver([snapshot()])], {}, { supervisorKeys: keys });
    const dir = mkdtempSync(join(tmpdir(), 'sandgate-token-'));
    const file = join(dir, 'token');
    writeFileSync(file, (await mintSupervisorToken(keys, 'team-a', 'web', 3600)) + '\n');
    const proc = spawn(process.execPath, [CLI, 'supervisor', '--gateway', `ws://127.0.0.1:${t.gw.supervisorPort}`, '--token-file', file], { stdio: ['ignore', 'pipe', 'pipe'] });
    const exited = new Promise<number | null>((r) => proc.once('exit', (code) => r(code)));
    try {
      const lines: Record<string, unknown>[] = [];
      const waiters = new Map<string, (line: Record<string, unknown>) => void>();
      onLogLines(proc.stdout, (line) => {
        lines.push(line);
        waiters.get(String(line.msg))?.(line);
      });
      const seen = (msg: string) =>
        new Promise<Record<string, unknown>>((resolve, reject) => {
          const hit = lines.find((l) => l.msg === msg);
          if (hit !== undefined) return resolve(hit);
          waiters.set(msg, resolve);
          void exited.then((code) => reject(new Error(`supervisor exited with ${code}: ${JSON.stringify(lines)}`)));
        });
      const accepted = await seen('accepted');
      const refreshed = seen('token refreshed');
      // The sidecar (here: the test) rotates the token file.
      const next = await mintSupervisorToken(keys, 'team-a', 'web', 7200);
      writeFileSync(file, next + '\n');
      proc.kill('SIGHUP');
      expect((await refreshed).expiresAt).toBe(JSON.parse(Buffer.from(next.split('.')[1]!, 'base64url').toString()).exp * 1000);
      expect(t.gw.supervisors!.session('team-a', 'web')?.sessionId).toBe(accepted.sessionId);
      expect(lines.some((l) => l.msg === 'disconnected')).toBe(false);
    } finally {
      proc.kill('SIGTERM');
      await exited;
      await t.close();
    }
  });
});

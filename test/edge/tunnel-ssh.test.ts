import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeApiKeyFiles } from '../helpers/api-key-files.js';
import { eventually } from '../helpers/eventually.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { snapshot } from '../helpers/snapshots.js';
import { needsOpenssh, OPENSSH, runOpenssh, startSshd, type Sshd } from '../helpers/sshd.js';
import { TestDriver } from '../helpers/test-driver.js';

/**
 * The real thing: OpenSSH's client, with `sandgate tunnel` as its ProxyCommand, to a real sshd that is the
 * sandbox's port declared `tcp` — a command runs and a file is copied with scp through CONNECT at the
 * embedded proxy; and the command says in one line why a tunnel was refused.
 */

const CLI = fileURLToPath(new URL('../../dist/src/cli/main.js', import.meta.url));
const PEPPER = 'pepper-for-ssh-tunnel-tests-0123456789abcdef0123';

function runCli(args: readonly string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { timeout: 30_000 }, (err, stdout, stderr) => {
      resolve({ code: err === null ? 0 : Number((err as { code?: unknown }).code ?? -1), stdout, stderr });
    });
  });
}

/**
 * An HTTP-only middlebox: refuses CONNECT with its own plain 403 (no sandgate answer), and passes
 * WebSocket upgrades on to the gateway byte for byte.
 */
async function startHttpOnlyProxy(gatewayPort: number): Promise<{ server: Server; port: number; connects: () => number }> {
  let connects = 0;
  const server = createServer((_req, res) => res.writeHead(502).end());
  server.on('connect', (_req: IncomingMessage, socket) => {
    connects++;
    socket.end('HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n');
  });
  server.on('upgrade', (req: IncomingMessage, socket, head: Buffer) => {
    const up = connect(gatewayPort, '127.0.0.1');
    let text = `${req.method} ${req.url} HTTP/1.1\r\n`;
    for (let i = 0; i < req.rawHeaders.length; i += 2) text += `${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}\r\n`;
    up.write(text + '\r\n');
    if (head.length > 0) up.write(head);
    up.pipe(socket).pipe(up);
    up.on('error', () => socket.destroy());
    socket.on('error', () => up.destroy());
    socket.on('close', () => up.destroy());
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { server, port: (server.address() as AddressInfo).port, connects: () => connects };
}

describe.skipIf(!OPENSSH)(needsOpenssh('OpenSSH through sandgate tunnels'), () => {
  let sshd: Sshd;
  let t: TestGateway;
  let key: string;
  let gateway: string;

  beforeAll(async () => {
    sshd = await startSshd();
    const k = await writeApiKeyFiles(PEPPER, { 'team-a': 'team-a' });
    key = k.keys['team-a'];
    const box = { sessionModel: 'none' as const, endpoint: { kind: 'address' as const, addresses: ['127.0.0.1'] } };
    t = await startTestGateway([new TestDriver([snapshot({ name: 'web', ...box, ports: [sshd.port, 8000], tcpPorts: [sshd.port] })])], { apiKeys: k.keysFile, keyPepperFile: k.pepperFile, readinessWaitMs: 0 });
    gateway = `http://127.0.0.1:${t.gw.proxyPort}`;
  });
  afterAll(async () => {
    await t?.close();
    sshd?.close();
  });

  const proxyCommand = (): string => `${process.execPath} ${CLI} tunnel team-a/web ${sshd.port} --gateway ${gateway} --api-key ${key}`;

  it('ssh runs a command through CONNECT', async () => {
    const r = await runOpenssh('ssh', sshd.keyFile, proxyCommand(), ['root@team-a.web', 'echo ok-through-connect']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toBe('ok-through-connect\n');
  });

  it('scp copies a file through CONNECT, byte for byte', async () => {
    const src = join(sshd.dir, 'payload.bin');
    const dst = join(sshd.dir, 'copied.bin');
    const payload = randomBytes(3 * 1024 * 1024);
    writeFileSync(src, payload);
    const r = await runOpenssh('scp', sshd.keyFile, proxyCommand(), ['-q', src, `root@team-a.web:${dst}`]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(readFileSync(dst).equals(payload)).toBe(true);
  });

  it('ssh and scp through the WebSocket tunnel (--via websocket)', async () => {
    const pc = `${proxyCommand()} --via websocket`;
    const r = await runOpenssh('ssh', sshd.keyFile, pc, ['root@team-a.web', 'echo ok-through-websocket']);
    expect([r.code, r.stderr, r.stdout]).toEqual([0, '', 'ok-through-websocket\n']);
    const src = join(sshd.dir, 'payload-ws.bin');
    const dst = join(sshd.dir, 'copied-ws.bin');
    const payload = randomBytes(2 * 1024 * 1024);
    writeFileSync(src, payload);
    const c = await runOpenssh('scp', sshd.keyFile, pc, ['-q', src, `root@team-a.web:${dst}`]);
    expect([c.code, c.stderr]).toEqual([0, '']);
    expect(readFileSync(dst).equals(payload)).toBe(true);
  });

  it('behind a proxy that passes only HTTP, sandgate tunnel falls back from CONNECT to the WebSocket tunnel', async () => {
    const middle = await startHttpOnlyProxy(t.gw.proxyPort!);
    try {
      const pc = `${process.execPath} ${CLI} tunnel team-a/web ${sshd.port} --gateway http://127.0.0.1:${middle.port} --api-key ${key}`;
      const r = await runOpenssh('ssh', sshd.keyFile, pc, ['root@team-a.web', 'echo ok-after-fallback']);
      expect([r.code, r.stderr, r.stdout]).toEqual([0, '', 'ok-after-fallback\n']);
      expect(middle.connects()).toBe(1);
    } finally {
      middle.server.close();
    }
  });

  it('sandgate port-forward prints each local address and opens one tunnel per connection: ssh to it, a refused port says why', async () => {
    const child = spawn(process.execPath, [CLI, 'port-forward', 'team-a/web', String(sshd.port), '0:8000', '--gateway', gateway, '--api-key', key], { stdio: ['ignore', 'pipe', 'pipe'] });
    try {
      let out = '';
      let err = '';
      child.stdout.on('data', (c: Buffer) => (out += c.toString()));
      child.stderr.on('data', (c: Buffer) => (err += c.toString()));
      const lines = await eventually(() => {
        const l = out.split('\n').filter((x) => x.startsWith('Forwarding from '));
        return l.length === 2 && l;
      }, 20_000, () => `two listening lines (stdout ${JSON.stringify(out)}, stderr ${JSON.stringify(err)})`);
      const local = (line: string) => Number(/^Forwarding from 127\.0\.0\.1:(\d+) -> \d+$/.exec(line)![1]);
      expect(lines[0]).toMatch(new RegExp(` -> ${sshd.port}$`));
      expect(lines[1]).toMatch(/ -> 8000$/);
      for (const n of [1, 2]) {
        const r = await runOpenssh('ssh', sshd.keyFile, 'none', ['-p', String(local(lines[0]!)), 'root@127.0.0.1', `echo forwarded-${n}`]);
        expect([r.code, r.stderr, r.stdout]).toEqual([0, '', `forwarded-${n}\n`]);
      }
      const refused: Socket = connect(local(lines[1]!), '127.0.0.1');
      refused.on('error', () => undefined);
      await once(refused, 'close');
      await eventually(() => err.includes('sandgate: tunnel refused: 409 port_not_tcp: '), 10_000, () => `the refusal on stderr (${JSON.stringify(err)})`);
    } finally {
      child.kill();
    }
  });

  it('sandgate tunnel says in one line why a tunnel was refused', async () => {
    const notTcp = await runCli(['tunnel', 'team-a/web', '8000', '--gateway', gateway, '--api-key', key]);
    expect(notTcp.code).toBe(1);
    expect(notTcp.stderr).toMatch(/^sandgate: tunnel refused: 409 port_not_tcp: .+\n$/);
    const noKey = await runCli(['tunnel', 'team-a/web', String(sshd.port), '--gateway', gateway]);
    expect(noKey.code).toBe(1);
    expect(noKey.stderr).toMatch(/^sandgate: tunnel refused: 401 api_key_required: .+\n$/);
    const bad = await runCli(['tunnel', 'team-a', '22', '--gateway', gateway]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('is not <namespace>/<name>');
  });
});

import { execFile } from 'node:child_process';
import { createServer, request, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createTcpServer, type Server } from 'node:net';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { clusterFiles, startGatewayProcess } from '../helpers/gateway-process.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';

const CLI = fileURLToPath(new URL('../../dist/src/cli/main.js', import.meta.url));
const run = promisify(execFile);

const LISTENERS = ['--grpc-port', '--admin-port', '--ops-port', '--supervisor-port', '--proxy-port', '--relay-port'] as const;

function blocker(): Promise<{ server: Server; port: number }> {
  return new Promise((resolve) => {
    const server = createTcpServer();
    server.listen(0, '127.0.0.1', () => resolve({ server, port: (server.address() as { port: number }).port }));
  });
}

describe.concurrent('start-up failures: one line, exit code 2', () => {
  let files: { sandboxes: string; secret: string };
  let redis: RedisServer;
  beforeAll(async () => {
    files = clusterFiles('sandboxes: []\n');
    redis = await startRedisServer();
  });
  afterAll(() => redis.stop());

  // A gateway that starts instead of failing would run until stopped: the timeout (SIGTERM) only ends that
  // hang, and the test then fails on its exit code.
  const serve = (args: readonly string[]) =>
    run(process.execPath, [CLI, 'serve', '--listen-host', '127.0.0.1', '--demo', 'off', '--sandboxes', files.sandboxes, '--supervisor-secret-file', files.secret, ...args], { timeout: 25_000 }).then(
      () => ({ code: 0, stderr: '' }),
      (err: { code: number; stderr: string }) => ({ code: err.code, stderr: err.stderr }),
    );

  it.each(LISTENERS)('%s taken: "sandgate: listen_failed: <flag> <port> is already in use"', async (flag) => {
    const { server, port } = await blocker();
    try {
      const others = LISTENERS.filter((f) => f !== flag).flatMap((f) => [f, '0']);
      const out = await serve([...others, flag, String(port)]);
      expect(out.code).toBe(2);
      expect(out.stderr).toBe(`sandgate: listen_failed: ${flag} ${port} is already in use (address 127.0.0.1:${port})\n`);
    } finally {
      server.close();
    }
  });

  it.each(LISTENERS)('--workers 2, %s taken: the same one line, once, and exit code 2 (no worker restarted)', async (flag) => {
    const { server, port } = await blocker();
    try {
      const others = LISTENERS.filter((f) => f !== flag).flatMap((f) => [f, '0']);
      // Supervisor sessions across workers need Redis presence (and open the supervisor listener).
      const out = await serve(['--workers', '2', '--presence', redis.url, ...others, flag, String(port)]);
      expect(out.code).toBe(2);
      expect(out.stderr).toBe(`sandgate: listen_failed: ${flag} ${port} is already in use (address 127.0.0.1:${port})\n`);
    } finally {
      server.close();
    }
  });

  it('a listen host that is not on this machine names --listen-host; no stack trace', async () => {
    const out = await serve([...LISTENERS.flatMap((f) => [f, '0']), '--listen-host', '192.0.2.1']);
    expect(out.code).toBe(2);
    expect(out.stderr).toMatch(/^sandgate: listen_failed: --listen-host 192\.0\.2\.1 is not an address of this machine \(--[a-z]+-port 0\)\n$/);
  });

  it('--log-level debug adds the cause\'s stack', async () => {
    const { server, port } = await blocker();
    try {
      const out = await serve([...LISTENERS.filter((f) => f !== '--admin-port').flatMap((f) => [f, '0']), '--admin-port', String(port), '--log-level', 'debug']);
      expect(out.code).toBe(2);
      const [first, ...rest] = out.stderr.trim().split('\n');
      expect(first).toBe(`sandgate: listen_failed: --admin-port ${port} is already in use (address 127.0.0.1:${port})`);
      expect(rest.join('\n')).toContain('EADDRINUSE');
      expect(rest.join('\n')).toMatch(/\n\s+at /);
    } finally {
      server.close();
    }
  });
});

describe('SIGTERM under load', () => {
  // An upstream that answers some requests at once and holds others open: the gateway must cut what is
  // still in flight when its shutdown deadline passes, and still exit 0 before the CLI's hard exit.
  const held = new Set<ServerResponse>();
  let received = 0;
  const onRequest: ((n: number) => void)[] = [];
  const upstream = createServer((req: IncomingMessage, res: ServerResponse) => {
    received++;
    for (const f of onRequest) f(received);
    if (req.url === '/hold') held.add(res);
    else res.end('ok');
  });
  let upstreamPort = 0;
  beforeAll(async () => {
    await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
    upstreamPort = (upstream.address() as { port: number }).port;
  });
  afterAll(async () => {
    for (const res of held) res.destroy();
    upstream.closeAllConnections();
    await new Promise<void>((r) => upstream.close(() => r()));
  });

  it('exits 0 within --shutdown-timeout-ms while requests are in flight and more keep coming', async () => {
    const files = clusterFiles('sandboxes:\n  - {namespace: a, name: web, address: 127.0.0.1, supervisor: none}\n');
    const g = await startGatewayProcess('gw-sigterm', ['--sandboxes', files.sandboxes, '--supervisor-secret-file', files.secret, '--shutdown-timeout-ms', '1500']);
    const host = `${upstreamPort}-web.a.localhost`;
    const send = (path: string): Promise<number> =>
      new Promise((resolve) => {
        const req = request({ host: '127.0.0.1', port: g.proxyPort, path, headers: { host } }, (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode!));
          res.on('error', () => resolve(-1));
        });
        req.on('error', () => resolve(-1));
        req.end();
      });
    const holding = Array.from({ length: 20 }, () => send('/hold'));
    await new Promise<void>((resolve) => onRequest.push((n) => n >= 20 && resolve()));
    let exited = false;
    const exit = g.exited().then((code) => ((exited = true), code));
    const load = (async () => {
      const statuses: number[] = [];
      while (!exited) statuses.push(await send('/'));
      return statuses;
    })();
    // Steady traffic is flowing before the signal.
    await new Promise<void>((resolve) => onRequest.push((n) => n >= 60 && resolve()));
    g.signal('SIGTERM');
    expect(await exit).toBe(0);
    expect(g.logs.some((l) => l.msg === 'sandgate stopped')).toBe(true);
    expect(g.logs.some((l) => l.msg === 'shutdown took too long; exiting')).toBe(false);
    // The held requests were cut when the deadline passed, not left hanging.
    expect(await Promise.all(holding)).toEqual(holding.map(() => -1));
    expect((await load).filter((s) => s === 200).length).toBeGreaterThan(0);
  });
});

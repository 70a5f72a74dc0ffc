import { spawn } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';
import { clusterFiles, onLogLines } from '../helpers/gateway-process.js';
import { freePort } from '../helpers/redis-server.js';
import { eventually } from '../helpers/eventually.js';
import { rawRequest } from '../helpers/upstream.js';

/**
 * `--max-connections` under `--workers`: each worker process holds its own cap, and a connection past it
 * is closed. (net.Server's own maxConnections would hand it back to the primary, which hands it to a
 * worker again, over and over while every worker is full: the connection would hang, never closed.)
 */

const CLI = fileURLToPath(new URL('../../dist/src/cli/main.js', import.meta.url));

it('--workers 2 --max-connections 1: a third connection to the proxy port is closed, not passed between full workers', { timeout: 180_000 }, async () => {
  const [admin, proxy] = [await freePort(), await freePort()];
  const files = clusterFiles('sandboxes: []\n');
  const args = ['serve', '--workers', '2', '--max-connections', '1', '--request-header-timeout-ms', '600000', '--sandboxes', files.sandboxes, '--admin-port', String(admin), '--proxy-port', String(proxy), '--grpc-port', '0', '--relay-port', '0', '--listen-host', '127.0.0.1'];
  const proc = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  const sockets: Socket[] = [];
  try {
    let started = 0;
    await new Promise<void>((resolve, reject) => {
      onLogLines(proc.stdout!, (line) => {
        if (line.msg === 'sandgate started' && ++started === 2) resolve();
      });
      void exited.then((code) => reject(new Error(`exited with ${code}`)));
    });
    let closed = 0;
    for (let i = 0; i < 3; i++) {
      const s = connect(proxy, '127.0.0.1');
      s.on('error', () => {});
      s.once('close', () => closed++);
      sockets.push(s);
      await new Promise<void>((resolve) => s.once('connect', resolve));
    }
    // Two workers, one place each, and no timeout near: only the cap closes one of the three.
    await eventually(() => closed > 0, 20_000, 'a connection past the cap closed');
    expect((await rawRequest(admin, '/healthz', { host: 'x' })).status).toBe(200);
  } finally {
    for (const s of sockets) s.destroy();
    proc.kill('SIGTERM');
    expect(await exited).toBe(0);
  }
});

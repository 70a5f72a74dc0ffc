import { createServer, type Server } from 'node:http';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { packageRoot } from '../config/paths.js';
import { parseSandboxesFile } from '../drivers/file/file-driver.js';

/**
 * The demo `npm start` runs with no configuration: the bundled example sandboxes, each backed by a tiny
 * HTTP upstream on its loopback address and ports, answering with what it received.
 */

export const DEMO_SANDBOXES = join(packageRoot(), 'examples', 'demo-sandboxes.yaml');

export interface Demo {
  readonly sandboxesPath: string;
  readonly upstreams: readonly string[];
  close(): Promise<void>;
}

export async function startDemo(path = DEMO_SANDBOXES): Promise<Demo> {
  const sandboxes = parseSandboxesFile(await readFile(path, 'utf8'), path);
  const servers: Server[] = [];
  const upstreams: string[] = [];
  for (const s of sandboxes) {
    if (s.endpoint.kind !== 'address') continue;
    const address = s.endpoint.addresses[0]!;
    for (const port of s.ports ?? [8000]) {
      const server = createServer((req, res) => {
        const body = JSON.stringify({ sandbox: `${s.namespace}/${s.name}`, upstream: `${address}:${port}`, method: req.method, path: req.url, host: req.headers.host });
        res.writeHead(200, { 'content-type': 'application/json' }).end(body + '\n');
      });
      await new Promise<void>((resolve, reject) => {
        server.once('error', reject);
        server.listen(port, address, () => resolve());
      });
      servers.push(server);
      upstreams.push(`${address}:${port}`);
    }
  }
  return {
    sandboxesPath: path,
    upstreams,
    async close() {
      await Promise.all(servers.map((s) => new Promise<void>((r) => s.close(() => r()))));
    },
  };
}

import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { packageRoot } from '../lib/package-root.js';
import { parseSandboxesFile, type FileSandbox } from '../drivers/file/file-driver.js';
import { SupervisorClient } from '../sessions/supervisor-client.js';
import { mintSupervisorToken, type SupervisorKeys } from '../sessions/supervisor-token.js';
import { sandboxKey } from '../domain/sandbox.js';

/**
 * The demo `npm start` runs with no configuration: the bundled example sandboxes, each backed by a tiny
 * HTTP upstream on its loopback address and ports, answering with what it received.
 */

export const DEMO_SANDBOXES = join(packageRoot(), 'examples', 'demo-sandboxes.yaml');

export interface Demo {
  readonly sandboxesPath: string;
  readonly sandboxes: readonly FileSandbox[];
  readonly upstreams: readonly string[];
  /** A fresh supervisor token key for this run (the demo needs no configured secret). */
  readonly supervisorKeys: SupervisorKeys;
  /** Connects a reference supervisor for every `supervisor: required` sandbox. */
  startSupervisors(supervisorPort: number): Promise<void>;
  close(): Promise<void>;
}

export async function startDemo(audience: string, path = DEMO_SANDBOXES): Promise<Demo> {
  const sandboxes = parseSandboxesFile(await readFile(path, 'utf8'), path);
  const servers: Server[] = [];
  const upstreams: string[] = [];
  for (const s of sandboxes) {
    if (s.endpoint.kind !== 'address') continue;
    const address = s.endpoint.addresses[0]!;
    for (const port of s.ports ?? [8000]) {
      const server = createServer((req, res) => {
        const body = JSON.stringify({ sandbox: sandboxKey(s.namespace, s.name), upstream: `${address}:${port}`, method: req.method, path: req.url, host: req.headers.host });
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
  const supervisorKeys: SupervisorKeys = { keys: [{ kid: 'demo', secret: randomBytes(32) }], audience };
  const clients: SupervisorClient[] = [];
  return {
    sandboxesPath: path,
    sandboxes,
    upstreams,
    supervisorKeys,
    async startSupervisors(supervisorPort) {
      for (const s of sandboxes) {
        if (s.sessionModel !== 'required') continue;
        // A token source, not one token: a session ends at its token's expiry unless refreshed, and a demo may run for days.
        const token = () => mintSupervisorToken(supervisorKeys, s.namespace, s.name, 86_400);
        clients.push(
          new SupervisorClient({ gateway: `ws://127.0.0.1:${supervisorPort}`, token, namespace: s.namespace, name: s.name, instanceId: `demo-${s.name}` }).start(),
        );
      }
    },
    async close() {
      for (const c of clients) c.stop();
      await Promise.all(servers.map((s) => new Promise<void>((r) => s.close(() => r()))));
    },
  };
}

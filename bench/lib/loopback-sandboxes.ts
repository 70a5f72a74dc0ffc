import { writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { join } from 'node:path';
import type { HttpRequestSpec } from './compare.js';
import { browserGets, sandboxName, sandboxNamespace } from './sandboxes.js';

/**
 * Sandboxes the proxy benches really connect to: named like every bench's sandboxes (sandboxes.ts), but
 * every one at 127.0.0.1, where the bench's upstream listens, so proxied traffic never leaves loopback.
 * The port a request reaches is the upstream's, spelled in its Host (`<port>-<name>.<namespace>.localhost`).
 */

export const LOOPBACK = '127.0.0.1';

/** What upstream-server.ts answers to every request: a proxy that returns it did reach the bench's upstream. */
export const UPSTREAM_BODY = '{"ok":true,"server":"sandgate-bench-upstream"}\n';

export function writeLoopbackSandboxesFile(dir: string, count: number): string {
  const path = join(dir, `sandboxes-${count}-loopback.json`);
  const parts: string[] = [];
  for (let i = 0; i < count; i++) {
    parts.push(JSON.stringify({ namespace: sandboxNamespace(i), name: sandboxName(i), id: 'sbx-' + i, address: LOOPBACK, state: 'ready', supervisor: 'none' }));
  }
  writeFileSync(path, '{"sandboxes":[\n' + parts.join(',\n') + '\n]}\n');
  return path;
}

export function loopbackHost(i: number, port: number): string {
  return `${port}-${sandboxName(i)}.${sandboxNamespace(i)}.localhost`;
}

/** A browser-like GET to sandbox paths, spread over `sandboxes` by Host. */
export function proxyRequests(sandboxes: number, upstreamPort: number): HttpRequestSpec[] {
  return browserGets(sandboxes, '/api/v1/files?path=%2Fhome%2Fuser', (i) => loopbackHost(i, upstreamPort));
}

/** One request with `host` through `url` (fetch may not set Host), for checking where a proxy sends it. */
export function probe(url: string, host: string, timeoutMs = 5_000): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url + '/api/v1/files', { headers: { host, accept: 'application/json' }, agent: false, timeout: timeoutMs }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`no answer from ${url} within ${timeoutMs} ms`)));
    req.on('error', reject);
    req.end();
  });
}

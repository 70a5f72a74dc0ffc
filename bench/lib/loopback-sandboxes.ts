import { writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { join } from 'node:path';
import { TLS_SERVERNAME, type HttpRequestSpec, type HttpSide } from './compare.js';
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

/** One request with `host` through `side` (fetch may not set Host), over TLS when its url is https. */
function probe(side: HttpSide, host: string): Promise<{ status: number; body: string }> {
  const send = side.url.startsWith('https:') ? httpsRequest : request;
  return new Promise((resolve, reject) => {
    const headers = { host, accept: 'application/json' };
    const req = send(side.url + '/api/v1/files', { headers, agent: false, timeout: 5_000, ca: side.ca, servername: TLS_SERVERNAME }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`no answer from ${side.url} within 5 s`)));
    req.on('error', reject);
    req.end();
  });
}

/** Throws unless every side carries a request for sandbox 0 to the bench's upstream on `upstreamPort`, and nowhere else. */
export async function checkReachesUpstream(sides: readonly HttpSide[], upstreamPort: number): Promise<void> {
  for (const s of sides) {
    const r = await probe(s, loopbackHost(0, upstreamPort));
    if (r.status !== 200 || r.body !== UPSTREAM_BODY) throw new Error(`${s.target.name} (${s.url}) did not reach the bench upstream: ${r.status} ${r.body.slice(0, 200)}`);
  }
}

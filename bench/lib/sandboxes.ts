import { writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { join } from 'node:path';
import { TLS_SERVERNAME, type HttpRequestSpec, type HttpSide } from './compare.js';
import type { BenchContext } from './section.js';
import { startBare } from './targets.js';
import type { BackendSnapshot } from '../../src/domain/sandbox.js';

/**
 * The sandboxes every section routes to: sandbox `i` is `bench-<i mod 16>/sb-<i>`, with the opaque id
 * `sbx-<i>` and the address 10.x.y.z spelled from `i`. Load workers in other processes rebuild the same
 * names from an index, so nothing but a count crosses process boundaries.
 */

export const NAMESPACES = 16;
export const ROUTE_PORT = 8000;

export function sandboxNamespace(i: number): string {
  return 'bench-' + (i % NAMESPACES);
}

export function sandboxName(i: number): string {
  return 'sb-' + i;
}

export function sandboxAddress(i: number): string {
  return `10.${(i >>> 16) & 255}.${(i >>> 8) & 255}.${i & 255}`;
}

/** The host a request for sandbox `i` names: `<port>-<name>.<namespace>.localhost`. */
export function sandboxHost(i: number, port = ROUTE_PORT): string {
  return `${port}-${sandboxName(i)}.${sandboxNamespace(i)}.localhost`;
}

/** The upstream the gateway answers for sandbox `i` (what the bare baselines answer too). */
export function sandboxUpstream(i: number): string {
  return sandboxAddress(i) + ':' + ROUTE_PORT;
}

export type SupervisorMode = 'none' | 'required';

/**
 * Writes a sandboxes file (JSON, the format in README.md) of `count` ready sandboxes. `none` makes them
 * Ready from the file alone (routing benches); `required` leaves them waiting for supervisor sessions.
 * `loopback` puts every one at 127.0.0.1, where the proxy benches' upstream listens, so proxied traffic
 * never leaves loopback (the port a request reaches is then the upstream's, spelled in its Host).
 */
export function writeSandboxesFile(dir: string, count: number, supervisor: SupervisorMode, loopback = false): string {
  const path = join(dir, `sandboxes-${count}-${supervisor}${loopback ? '-loopback' : ''}.json`);
  const parts: string[] = [];
  for (let i = 0; i < count; i++) {
    const address = loopback ? '127.0.0.1' : sandboxAddress(i);
    parts.push(JSON.stringify({ namespace: sandboxNamespace(i), name: sandboxName(i), id: 'sbx-' + i, address, state: 'ready', supervisor }));
  }
  writeFileSync(path, '{"sandboxes":[\n' + parts.join(',\n') + '\n]}\n');
  return path;
}

/**
 * A snapshot as a driver reports it (Kubernetes-shaped: uid, resourceVersion, pod uid as instance id,
 * one opaque id, a Ready condition with its transition time, one pod IP).
 */
export function benchSnapshot(i: number, resourceVersion = 1, supervisor: SupervisorMode = 'none'): BackendSnapshot {
  return {
    namespace: sandboxNamespace(i),
    name: sandboxName(i),
    uid: `4f1c2a7e-0000-4000-8000-${String(i).padStart(12, '0')}`,
    resourceVersion: String(resourceVersion),
    instanceId: `pod-9b3d5e1a-${String(i).padStart(12, '0')}`,
    ids: ['sbx-' + i],
    state: 'ready',
    conditions: [{ type: 'Ready', status: 'True', reason: 'DependenciesReady', message: '', lastTransitionTime: '2025-01-01T00:00:00Z' }],
    endpoint: { kind: 'address', addresses: [sandboxAddress(i)] },
    sessionModel: supervisor,
  };
}

/**
 * `count` snapshots starting at `from`, passed through JSON as a driver's decoder would hand them over:
 * flat strings, one object graph per snapshot, nothing shared between snapshots. Built by chunks so that
 * a million of them never sit in one JSON text.
 */
export function decodedSnapshots(from: number, count: number): BackendSnapshot[] {
  const chunk: BackendSnapshot[] = [];
  for (let i = from; i < from + count; i++) chunk.push(benchSnapshot(i));
  return JSON.parse(JSON.stringify(chunk)) as BackendSnapshot[];
}

/** 16 distinct Hosts: enough to keep the gateway from answering one sandbox from a hot cache line. */
const DISTINCT_REQUESTS = 16;

/** A browser-like GET of `path`, to DISTINCT_REQUESTS of the sandboxes, each named by its host on `port`. */
function browserGets(sandboxes: number, path: string, port = ROUTE_PORT): HttpRequestSpec[] {
  return Array.from({ length: DISTINCT_REQUESTS }, (_, k) => ({
    method: 'GET',
    path,
    headers: {
      host: sandboxHost((k * 7919) % sandboxes, port),
      accept: 'application/json',
      'user-agent': 'Mozilla/5.0 (X11; Linux x86_64) Chrome/131.0',
      'x-forwarded-for': '203.0.113.7',
      'x-forwarded-proto': 'https',
      'x-request-id': `bench-${k}`,
    },
  }));
}

/** What nginx auth_request / Envoy's http_service send: the original Host and path under /authz. */
export function authzRequests(sandboxes: number): HttpRequestSpec[] {
  return browserGets(sandboxes, '/authz/api/v1/files?path=%2Fhome%2Fuser');
}

/** What the bench's upstream answers to every request: a proxy that returns it did reach that upstream. */
export const UPSTREAM_BODY = '{"ok":true,"server":"sandgate-bench-upstream"}\n';

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

/**
 * The proxy sections' setup: the bench's upstream (bare-http-server.js) and a sandboxes file of `count`
 * sandboxes, every one at 127.0.0.1; `requests(hosts)` spreads browser-like GETs by Host over the first
 * `hosts`; `reachedBy` throws unless every side carries a request for sandbox 0 there, and nowhere else.
 */
export async function startUpstream(ctx: BenchContext, count: number) {
  const target = await startBare(ctx.procs, 'upstream', 'lib/bare-http-server.js', ctx.targetOptions, ['upstream']);
  const port = target.port('main');
  return {
    target,
    port,
    sandboxes: writeSandboxesFile(ctx.tmp, count, 'none', true),
    requests: (hosts: number): HttpRequestSpec[] => browserGets(hosts, '/api/v1/files?path=%2Fhome%2Fuser', port),
    async reachedBy(sides: readonly HttpSide[]): Promise<void> {
      for (const s of sides) {
        const r = await probe(s, sandboxHost(0, port));
        if (r.status !== 200 || r.body !== UPSTREAM_BODY) throw new Error(`${s.target.name} (${s.url}) did not reach the bench upstream: ${r.status} ${r.body.slice(0, 200)}`);
      }
    },
  };
}

import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Registry } from 'prom-client';
import { isDnsLabel } from '../domain/labels.js';
import { PUBLIC_PHASES, type ActivityReadout, type PublicPhase, sandboxKey } from '../domain/sandbox.js';
import type { Logger } from '../observability/logger.js';
import type { SandboxView } from '../view/sandbox-view.js';
import { authorizeApi, type ApiAuth } from './api-access.js';
import { mintLink, revokeLink, type LinkApi } from './links-api.js';
import { refuseFraming, sendError, sendJson } from './respond.js';
import { sandboxJson } from './sandbox-json.js';
import type { SandboxWatch } from './sandbox-watch.js';

/**
 * The admin/public HTTP API: `/healthz` (the process is alive), `/readyz` (it should get traffic),
 * `/metrics` (Prometheus), and the sandbox status API under `/v1/sandboxes`.
 */

export interface Readiness {
  /** Reasons the gateway must not get traffic (drivers not synced, shutting down); empty = ready. */
  notReady(): string[];
  /** Reasons it serves in a degraded mode (presence store unreachable: serving from the mirror). */
  degraded(): string[];
}

export interface AdminApiDeps {
  readonly view: SandboxView;
  /** Traffic activity and idle decisions, shown with each sandbox. */
  readonly activity: ActivityReadout;
  readonly registry: Registry;
  readonly readiness: Readiness;
  readonly watch: SandboxWatch;
  readonly gatewayId: string;
  readonly log: Logger;
  /** The API key principals (api-access.ts); undefined without a key store: everything is visible. */
  readonly auth?: ApiAuth;
  /** The operator console under `/console` (console/console-api.ts), on the operator surface; undefined when it is off. */
  readonly console?: (req: IncomingMessage, res: ServerResponse, url: URL) => Promise<void>;
  /** Signed links (links-api.ts); undefined when links are off. */
  readonly links?: LinkApi | undefined;
}

/**
 * Which routes a listener serves: `all` (the admin port when no `--ops-port` is set: today's layout),
 * `operator` (the ops port: sandbox API, watch, metrics, health) or `health` (the decision port beside a
 * separate ops port: only /healthz and /readyz, so a tenant that can reach the door learns nothing else).
 */
export type ApiSurface = 'all' | 'operator' | 'health';

const SANDBOX_PATH = /^\/v1\/sandboxes\/([^/]+)\/([^/]+)$/;
const LINKS_PATH = /^\/v1\/sandboxes\/([^/]+)\/([^/]+)\/links$/;
const LINK_PATH = /^\/v1\/links\/([^/]+)$/;

export function createAdminApi(deps: AdminApiDeps, surface: ApiSurface = 'all') {
  const { view, registry, readiness } = deps;

  function list(url: URL, res: ServerResponse, sees: (ns: string) => boolean): void {
    const ns = url.searchParams.get('namespace');
    const phase = url.searchParams.get('phase');
    if (ns !== null && !isDnsLabel(ns)) return sendError(res, 'invalid_request', 'namespace must be a DNS-1123 label');
    if (phase !== null && !PUBLIC_PHASES.includes(phase as PublicPhase)) {
      return sendError(res, 'invalid_request', `phase must be one of ${PUBLIC_PHASES.join(', ')}`);
    }
    const items = [];
    for (const e of view.list()) {
      if ((ns !== null && e.namespace !== ns) || !sees(e.namespace)) continue;
      if (phase !== null && e.status.phase !== phase) continue;
      items.push(sandboxJson(e, deps.activity));
    }
    sendJson(res, 200, { items, gatewayId: deps.gatewayId, synced: view.synced });
  }

  async function links(api: LinkApi, req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    const mint = req.method === 'POST' ? LINKS_PATH.exec(path) : null;
    const revoke = req.method === 'DELETE' ? LINK_PATH.exec(path) : null;
    if (mint === null && revoke === null) return sendError(res, 'method_not_allowed', undefined, { allow: 'GET, HEAD' });
    const scope = authorizeApi(deps.auth, req.headers, res);
    if (scope === undefined) return;
    if (revoke !== null) return revokeLink(api, scope, revoke[1]!, res);
    const ns = mint![1]!;
    const name = mint![2]!;
    if (!isDnsLabel(ns) || !isDnsLabel(name)) return sendError(res, 'invalid_request', 'namespace and name must be DNS-1123 labels');
    return mintLink(api, view, scope, ns, name, req, res);
  }

  return async function handleAdmin(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://admin');
    const path = url.pathname;
    refuseFraming(res);
    if (surface !== 'health' && deps.links !== undefined && (req.method === 'POST' || req.method === 'DELETE')) return links(deps.links, req, res, path);
    if (req.method !== 'GET' && req.method !== 'HEAD') return sendError(res, 'method_not_allowed', undefined, { allow: 'GET, HEAD' });
    switch (path) {
      case '/healthz':
        return sendJson(res, 200, { status: 'ok' });
      case '/readyz': {
        const notReady = readiness.notReady();
        const degraded = readiness.degraded();
        const status = notReady.length > 0 ? 'not_ready' : degraded.length > 0 ? 'degraded' : 'ready';
        return sendJson(res, notReady.length > 0 ? 503 : 200, { status, notReady, degraded });
      }
    }
    if (surface === 'health') return sendError(res, 'not_found', `No route ${path}`);
    if (deps.console !== undefined && (path === '/console' || path.startsWith('/console/'))) return deps.console(req, res, url);
    switch (path) {
      case '/metrics': {
        const text = await registry.metrics();
        res.writeHead(200, { 'content-type': registry.contentType }).end(text);
        return;
      }
      case '/v1/sandboxes':
      case '/v1/sandboxes/watch': {
        const scope = authorizeApi(deps.auth, req.headers, res);
        if (scope === undefined) return;
        return path === '/v1/sandboxes' ? list(url, res, scope.sees) : deps.watch.serve(req, res, url, scope.sees, scope.team === '' ? undefined : 'team:' + scope.team);
      }
    }
    const m = SANDBOX_PATH.exec(path);
    if (m !== null) {
      const ns = m[1]!;
      const name = m[2]!;
      if (!isDnsLabel(ns) || !isDnsLabel(name)) return sendError(res, 'invalid_request', 'namespace and name must be DNS-1123 labels');
      const scope = authorizeApi(deps.auth, req.headers, res);
      if (scope === undefined) return;
      const refused = scope.refuses(ns);
      if (refused !== undefined) return sendError(res, refused);
      // Another tenant's sandbox gets the very answer a missing one gets.
      const e = scope.sees(ns) ? view.get(ns, name) : undefined;
      if (e === undefined) return sendError(res, 'sandbox_not_found', `No sandbox ${sandboxKey(ns, name)}`);
      return sendJson(res, 200, sandboxJson(e, deps.activity));
    }
    sendError(res, 'not_found', `No route ${path}`);
  };
}

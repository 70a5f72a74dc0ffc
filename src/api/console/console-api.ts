import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Registry } from 'prom-client';
import { RULES } from '../../domain/compose.js';
import { isDnsLabel } from '../../domain/labels.js';
import { PUBLIC_PHASES, type ActivityReadout, type PublicPhase, sandboxKey } from '../../domain/sandbox.js';
import type { SandboxView } from '../../view/sandbox-view.js';
import { authorizeApi, type ApiAuth, type ApiScope } from '../api-access.js';
import { FRAME_ANCESTORS_NONE, sendError, sendJson } from '../respond.js';
import type { ConsoleAssets } from './console-assets.js';
import { statsSnapshot } from './console-stats.js';
import { PhaseHistory } from './phase-history.js';
import { renderTable } from './console-table.js';

/**
 * The operator console under `/console` on the operator surface (docs/console.md):
 *
 * - `/console`: the page (no data in it), and `/console/assets/<name>`: its scripts and styles;
 * - `/console/api/overview`, `/console/api/gateways`, `/console/api/stats`: JSON the page polls;
 * - `/console/api/phase-changes?namespace=&name=`: one sandbox's recent phase changes (its detail view);
 * - `/console/table`: the same sandboxes as a static HTML table, for clients without JavaScript.
 *
 * The sandboxes themselves reach the page through `/v1/sandboxes/watch`. Every data route runs the
 * operator API's own authorization (api-access.ts): a team key sees only its namespaces, here as there.
 */

export interface GatewayLease {
  readonly gatewayId: string;
  /** The relay listener `host:port` the gateway published, when it did. */
  readonly relay: string | undefined;
  /** Milliseconds until the lease lapses unless renewed; undefined for this gateway's own (in-memory) presence. */
  readonly expiresInMs: number | undefined;
}

/** What the gateways view shows of presence (wired from the presence store; api knows nothing of sessions). */
export interface GatewaysSource {
  readonly presence: 'memory' | 'redis';
  /** Live gateway leases, this gateway's included. */
  leases(): GatewayLease[];
  /** Why presence is degraded (the store's backend unreachable); empty when healthy. */
  degraded(): string[];
}

// Starts like admin-api.ts AdminApiDeps: each part lists what it is handed, so either can change alone.
export interface ConsoleDeps {
  readonly view: SandboxView;
  readonly activity: ActivityReadout;
  readonly registry: Registry;
  readonly gatewayId: string;
  readonly gateways: GatewaysSource;
  readonly assets: ConsoleAssets;
  readonly auth?: ApiAuth | undefined;
  readonly now?: () => number;
}

const ASSET_PATH = /^\/console\/assets\/([a-z0-9.-]+)$/;
const TABLE_LIMIT_DEFAULT = 1000;
const TABLE_LIMIT_MAX = 100_000;

export function createConsole(deps: ConsoleDeps) {
  const { view, gatewayId } = deps;
  const now = deps.now ?? Date.now;
  const rules = RULES.map((r) => ({ name: r.name, phase: r.phase, when: r.when }));
  const history = new PhaseHistory(view, now);

  function gateways(sees: (ns: string) => boolean) {
    const sessions = new Map<string, number>();
    for (const e of view.list()) {
      const p = e.presence;
      if (p !== undefined && sees(e.namespace)) sessions.set(p.gatewayId, (sessions.get(p.gatewayId) ?? 0) + 1);
    }
    const leases = deps.gateways.leases();
    const ids = new Set(leases.map((l) => l.gatewayId));
    // A session whose gateway has no live lease in the mirror (just lapsed) still shows, so counts add up.
    const rows = [...leases, ...[...sessions.keys()].filter((id) => !ids.has(id)).map((id) => ({ gatewayId: id, relay: undefined, expiresInMs: undefined }))];
    return {
      gatewayId,
      presence: deps.gateways.presence,
      degraded: deps.gateways.degraded(),
      gateways: rows
        .map((l) => ({ gatewayId: l.gatewayId, self: l.gatewayId === gatewayId, live: ids.has(l.gatewayId), relay: l.relay ?? null, expiresInMs: l.expiresInMs ?? null, sessions: sessions.get(l.gatewayId) ?? 0 }))
        .sort((a, b) => (a.gatewayId < b.gatewayId ? -1 : a.gatewayId > b.gatewayId ? 1 : 0)),
    };
  }

  function table(url: URL, res: ServerResponse, sees: (ns: string) => boolean): void {
    const namespace = url.searchParams.get('namespace');
    const phase = url.searchParams.get('phase');
    const limitText = url.searchParams.get('limit');
    if (namespace !== null && !isDnsLabel(namespace)) return sendError(res, 'invalid_request', 'namespace must be a DNS-1123 label');
    if (phase !== null && !PUBLIC_PHASES.includes(phase as PublicPhase)) return sendError(res, 'invalid_request', `phase must be one of ${PUBLIC_PHASES.join(', ')}`);
    if (limitText !== null && (!/^\d{1,6}$/.test(limitText) || Number(limitText) < 1 || Number(limitText) > TABLE_LIMIT_MAX)) {
      return sendError(res, 'invalid_request', `limit must be an integer from 1 to ${TABLE_LIMIT_MAX}`);
    }
    const html = renderTable(view.list(), deps.activity, sees, { namespace, phase, limit: limitText === null ? TABLE_LIMIT_DEFAULT : Number(limitText) }, gatewayId, now());
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store', 'x-content-type-options': 'nosniff', 'content-security-policy': `default-src 'none'; ${FRAME_ANCESTORS_NONE}` }).end(html);
  }

  function phaseChanges(url: URL, res: ServerResponse, scope: ApiScope & { ok: true }): void {
    const namespace = url.searchParams.get('namespace');
    const name = url.searchParams.get('name');
    if (namespace === null || name === null || !isDnsLabel(namespace) || !isDnsLabel(name)) return sendError(res, 'invalid_request', 'namespace and name must be DNS-1123 labels');
    const refused = scope.refuses(namespace);
    if (refused !== undefined) return sendError(res, refused);
    const sees = scope.sees;
    // Another tenant's sandbox gets the very answer a missing one gets.
    const items = sees(namespace) ? history.of(sandboxKey(namespace, name)) : [];
    if (items.length === 0 && (!sees(namespace) || view.get(namespace, name) === undefined)) return sendError(res, 'sandbox_not_found', `No sandbox ${sandboxKey(namespace, name)}`);
    sendJson(res, 200, { items: items.map((c) => ({ ...c, at: new Date(c.at).toISOString() })) });
  }

  /** Answers a `/console…` request (GET or HEAD; the caller has checked the method). */
  return async function handleConsole(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    const path = url.pathname;
    if (path === '/console' || path === '/console/') return deps.assets.send(req, res, deps.assets.page);
    const m = ASSET_PATH.exec(path);
    if (m !== null) {
      const a = deps.assets.get(m[1]!);
      if (a === undefined) return sendError(res, 'not_found', `No console asset ${m[1]!}`);
      return deps.assets.send(req, res, a);
    }
    const routes = ['/console/table', '/console/api/overview', '/console/api/gateways', '/console/api/stats', '/console/api/phase-changes'];
    if (!routes.includes(path)) return sendError(res, 'not_found', `No route ${path}`);
    const scope = authorizeApi(deps.auth, req.headers, res);
    if (scope === undefined) return;
    switch (path) {
      case '/console/table':
        return table(url, res, scope.sees);
      case '/console/api/overview':
        return sendJson(res, 200, { gatewayId, synced: view.synced, phases: PUBLIC_PHASES, rules });
      case '/console/api/gateways':
        return sendJson(res, 200, gateways(scope.sees));
      case '/console/api/stats':
        return sendJson(res, 200, await statsSnapshot(deps.registry, now(), scope.sees, deps.auth === undefined || scope.team === '*'));
      case '/console/api/phase-changes':
        return phaseChanges(url, res, scope);
    }
  };
}

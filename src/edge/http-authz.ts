import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Decision, Deny } from '../domain/decide.js';
import type { HeaderMap, RouteRequest } from '../domain/route-key.js';
import { abortOnClose, type Decider } from './decider.js';
import { renderDenial } from './denial.js';
import { headersToRemove, type DoorOptions } from './headers.js';
import { relayHeaders } from './relay/relay-headers.js';
import { isDeny, originForm, singleHost } from './request-target.js';

/**
 * HTTP authz: the same decision for Envoy's ext_authz `http_service` and nginx `auth_request`. Any path
 * under `/authz/` on the admin port. The original path is what follows `/authz` (Envoy's `path_prefix`
 * prepends it) unless nginx passes it in `X-Original-URI`. 200 carries the upstream header (and
 * `x-sandgate-path` when the route rewrote the path); a denial carries its status, headers and body.
 */

export const AUTHZ_PREFIX = '/authz';
export const PATH_HEADER = 'x-sandgate-path';
export const SANDBOX_HEADER = 'x-sandgate-sandbox';
/** Envoy's HTTP ext_authz removes the request headers this response header lists (comma-separated). */
export const ENVOY_REMOVE_HEADER = 'x-envoy-auth-headers-to-remove';

/** True for the paths HTTP authz answers: `/authz` itself, anything under `/authz/`, or `/authz?…`. */
export function isAuthzPath(url: string): boolean {
  if (!url.startsWith(AUTHZ_PREFIX)) return false;
  if (url.length === AUTHZ_PREFIX.length) return true;
  const next = url.charCodeAt(AUTHZ_PREFIX.length);
  return next === 0x2f || next === 0x3f;
}

export function httpAuthzRoute(req: IncomingMessage): RouteRequest {
  const headers = req.headers as HeaderMap;
  const url = req.url ?? '/';
  const original = headers['x-original-uri'];
  const path = original !== undefined ? original : url.length > AUTHZ_PREFIX.length ? url.slice(AUTHZ_PREFIX.length) : '/';
  return { headers, host: headers['x-forwarded-host'] ?? headers.host, path };
}

/**
 * The route, or the 400 `invalid_route` a malformed request gets: two Host headers, or an absolute-form
 * original URI (nginx's `$request_uri` keeps it) whose authority disagrees with the host (request-target.ts).
 */
function checkedRoute(req: IncomingMessage, route: RouteRequest): RouteRequest | Deny {
  const host = singleHost(req.rawHeaders);
  if (typeof host === 'object') return host;
  const path = route.path ?? '/';
  // Only an absolute-form URI needs reading; origin-form (what Envoy's path_prefix yields) passes as is.
  if (path.startsWith('/') || !path.includes('://')) return route;
  const t = originForm(path, route.host);
  if (isDeny(t)) return t;
  return { headers: route.headers, host: t.host, path: t.path };
}

export function createHttpAuthz(decider: Decider, opts: DoorOptions) {
  const answer = (d: Decision, req: RouteRequest, res: ServerResponse): void => {
    if (res.destroyed) return;
    if (d.allow) {
      // One flat list handed to writeHead: with no setHeader() before it, Node writes the list as it is
      // instead of building its header map entry by entry (a measurable share of this door's own cost).
      const head: string[] = [opts.upstreamHeader, d.upstream, SANDBOX_HEADER, d.entry.key];
      if (d.target.path !== undefined) head.push(PATH_HEADER, d.target.path);
      for (const [k, v] of relayHeaders(d, opts.relay)) head.push(k, v);
      // The headers this answer sets are overwritten upstream (allowed_upstream_headers); every other
      // client-sent x-sandgate-* header is removed. `head` serves as the list of names set here: its
      // values (an address, ns/name, a path, a credential, a target) never start with x-sandgate-.
      const remove = headersToRemove(req.headers, opts.removeHeaders, head);
      if (remove !== undefined) head.push(ENVOY_REMOVE_HEADER, remove.join(','));
      head.push('content-length', '0');
      res.writeHead(200, head).end();
      return;
    }
    const r = renderDenial(d, req.headers.accept);
    for (const [k, v] of r.headers) res.setHeader(k, v);
    res.writeHead(r.status).end(r.body);
  };
  return function handleAuthz(req: IncomingMessage, res: ServerResponse): void {
    const parsed = httpAuthzRoute(req);
    const route = checkedRoute(req, parsed);
    if (isDeny(route)) return answer(route, parsed, res);
    void decider.decideAndAnswer('http_authz', route, res, abortOnClose, answer);
  };
}

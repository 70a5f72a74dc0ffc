import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Decision } from '../domain/decide.js';
import type { HeaderMap, RouteRequest } from '../domain/route-key.js';
import { abortOnClose, type Decider } from './decider.js';
import { renderDenial } from './denial.js';
import { presentHeaders, type DoorOptions } from './headers.js';
import { relayHeaders } from './relay/relay-headers.js';

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

export function httpAuthzRoute(req: IncomingMessage): RouteRequest {
  const headers = req.headers as HeaderMap;
  const url = req.url ?? '/';
  const original = headers['x-original-uri'];
  const path = original !== undefined ? original : url.length > AUTHZ_PREFIX.length ? url.slice(AUTHZ_PREFIX.length) : '/';
  return { headers, host: headers['x-forwarded-host'] ?? headers.host, path };
}

export function createHttpAuthz(decider: Decider, opts: DoorOptions) {
  const answer = (res: ServerResponse, d: Decision, req: RouteRequest): void => {
    if (res.destroyed) return;
    if (d.allow) {
      // One flat list handed to writeHead: with no setHeader() before it, Node writes the list as it is
      // instead of building its header map entry by entry (a measurable share of this door's own cost).
      const head: string[] = [opts.upstreamHeader, d.upstream];
      const remove = presentHeaders(req.headers, opts.removeHeaders);
      if (remove !== undefined) head.push(ENVOY_REMOVE_HEADER, remove.join(','));
      head.push(SANDBOX_HEADER, d.entry.key);
      if (d.target.path !== undefined) head.push(PATH_HEADER, d.target.path);
      for (const [k, v] of relayHeaders(d, opts.relay)) head.push(k, v);
      head.push('content-length', '0');
      res.writeHead(200, head).end();
      return;
    }
    const r = renderDenial(d, req.headers.accept);
    for (const [k, v] of r.headers) res.setHeader(k, v);
    res.writeHead(r.status).end(r.body);
  };
  return function handleAuthz(req: IncomingMessage, res: ServerResponse): void {
    const route = httpAuthzRoute(req);
    void decider.decideAndAnswer('http_authz', route, () => abortOnClose(res), (d) => answer(res, d, route));
  };
}

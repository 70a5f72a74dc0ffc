import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Exchange } from '../observability/exchange.js';
import type { Decision, Deny } from '../domain/decide.js';
import type { HeaderMap, RouteRequest } from '../domain/route-key.js';
import { abortOnClose, type Decider } from './decider.js';
import { renderDenial } from './denial.js';
import { allowChanges, forwardedClient, type AllowNames, type DoorOptions } from './headers.js';
import { isDeny, originForm, singleHost } from './request-target.js';

/**
 * HTTP authz: the same decision for Envoy's ext_authz `http_service` and nginx `auth_request`. Any path
 * under `/authz/` on the admin port. The original path is what follows `/authz` (Envoy's `path_prefix`
 * prepends it) unless nginx passes it in `X-Original-URI`. 200 carries the upstream header (and
 * `x-sandgate-path` when the route rewrote the path, `x-sandgate-upstream-protocol: h2c` for an h2c port); a denial carries its status, headers and body.
 */

export const AUTHZ_PREFIX = '/authz';
export const PATH_HEADER = 'x-sandgate-path';
export const SANDBOX_HEADER = 'x-sandgate-sandbox';
/** Envoy's HTTP ext_authz removes the request headers this response header lists (comma-separated). */
export const ENVOY_REMOVE_HEADER = 'x-envoy-auth-headers-to-remove';
const HTTP_AUTHZ_NAMES: AllowNames = { path: PATH_HEADER, sandbox: SANDBOX_HEADER };

/** True for the paths HTTP authz answers: `/authz` itself, anything under `/authz/`, or `/authz?…`. */
export function isAuthzPath(url: string): boolean {
  if (!url.startsWith(AUTHZ_PREFIX)) return false;
  if (url.length === AUTHZ_PREFIX.length) return true;
  const next = url.charCodeAt(AUTHZ_PREFIX.length);
  return next === 0x2f || next === 0x3f;
}

/** The route of an HTTP authz request: its target (the request line's) and lower-case headers. */
export function authzRoute(url: string, headers: HeaderMap, method?: string): RouteRequest {
  const original = headers['x-original-uri'];
  const path = original !== undefined ? original : url.length > AUTHZ_PREFIX.length ? url.slice(AUTHZ_PREFIX.length) : '/';
  // Envoy's http_service asks with the original method; nginx's auth_request always GETs, and passes the
  // original in X-Original-Method. The scheme the client used is X-Forwarded-Proto (Envoy sets it).
  return { headers, host: headers['x-forwarded-host'] ?? headers.host, path, method: headers['x-original-method'] ?? method, secure: headers['x-forwarded-proto'] === 'https' };
}

/**
 * The route, or the 400 `invalid_route` a malformed request gets: two Host headers (`host` is then that
 * denial, from request-target.ts singleHost), or an absolute-form original URI (nginx's `$request_uri`
 * keeps it) whose authority disagrees with the host.
 */
function checkedRoute(host: string | undefined | Deny, route: RouteRequest): RouteRequest | Deny {
  if (typeof host === 'object') return host;
  const path = route.path ?? '/';
  // Only an absolute-form URI needs reading; origin-form (what Envoy's path_prefix yields) passes as is.
  if (path.startsWith('/') || !path.includes('://')) return route;
  const t = originForm(path, route.host);
  if (isDeny(t)) return t;
  return { headers: route.headers, host: t.host, path: t.path };
}

/** An HTTP authz answer: status, the response headers as one flat name/value list, and the body. */
export interface AuthzReply {
  readonly status: number;
  readonly head: readonly string[];
  readonly body: string;
}

/** Where an HTTP authz request read by the admin port's front (authz-front.ts) is answered. */
export interface AuthzSink {
  /** Fires when the client goes away (a readiness wait then answers nothing). */
  signal(): AbortSignal;
  send(reply: AuthzReply): void;
  /** The connection's peer address (Envoy or nginx). */
  peer(): string;
  /** The request's method. */
  readonly method: string;
}

export interface HttpAuthz {
  /** A request node:http read. */
  readonly handle: (req: IncomingMessage, res: ServerResponse) => void;
  /** A request the admin port's front read itself: its target, and its headers (lower-case names, each once). */
  readonly handleParsed: (url: string, headers: HeaderMap, to: AuthzSink) => void;
}

export function createHttpAuthz(decider: Decider, opts: DoorOptions): HttpAuthz {
  const reply = (d: Decision, req: RouteRequest): AuthzReply => {
    if (d.allow) {
      // One flat list handed to writeHead: with no setHeader() before it, Node writes the list as it is
      // instead of building its header map entry by entry (a measurable share of this door's own cost).
      // The headers this answer sets are overwritten upstream (allowed_upstream_headers), the sandbox's own
      // cookies replacing the Cookie header; the ones to remove are named in one header Envoy reads.
      const { set: head, remove } = allowChanges(d, opts, req.headers, HTTP_AUTHZ_NAMES);
      if (remove !== undefined) head.push(ENVOY_REMOVE_HEADER, remove.join(','));
      head.push('content-length', '0');
      return { status: 200, head, body: '' };
    }
    const r = renderDenial(d, req.headers.accept, req.headers['sec-fetch-mode']);
    const head: string[] = [];
    for (const [k, v] of r.headers) head.push(k, v);
    // nginx's auth_request allows on any 2xx (Envoy's http_service only on 200): behind nginx (which
    // names the original method in X-Original-Method) the preflight answer is refused as 403 instead.
    if (r.status < 300 && req.headers['x-original-method'] !== undefined) {
      head.push('content-length', '0');
      return { status: 403, head, body: '' };
    }
    if (r.status !== 204) head.push('content-length', String(Buffer.byteLength(r.body)));
    return { status: r.status, head, body: r.body };
  };
  const answerResponse = (d: Decision, req: RouteRequest, res: ServerResponse): void => {
    if (res.destroyed) return;
    const r = reply(d, req);
    res.writeHead(r.status, r.head as string[]).end(r.body);
  };
  const answerSink = (d: Decision, req: RouteRequest, to: AuthzSink): void => to.send(reply(d, req));
  const signalOf = (to: AuthzSink): AbortSignal => to.signal();
  // A request refused before any decision (a malformed target): its record ends with that answer.
  const refused = (x: Exchange | undefined, d: Deny, req: RouteRequest): void => x?.denied(d.status, d.code, Buffer.byteLength(renderDenial(d, req.headers.accept).body));
  return {
    handle(req, res) {
      const parsed = authzRoute(req.url ?? '/', req.headers as HeaderMap, req.method);
      const route = checkedRoute(singleHost(req.rawHeaders), parsed);
      const x = decider.recorder?.begin('http_authz', { method: req.method ?? 'GET', target: parsed.path ?? '/', headers: parsed.headers, client: forwardedClient(parsed.headers, req.socket.remoteAddress ?? ''), peer: req.socket.remoteAddress ?? '' });
      if (isDeny(route)) {
        answerResponse(route, parsed, res);
        return refused(x, route, parsed);
      }
      void decider.decideAndAnswer('http_authz', route, res, abortOnClose, answerResponse, x);
    },
    handleParsed(url, headers, to) {
      const parsed = authzRoute(url, headers, to.method);
      // The front takes no request with a repeated header: its Host is single.
      const route = checkedRoute(headers.host, parsed);
      const x = decider.recorder?.begin('http_authz', { method: to.method, target: parsed.path ?? '/', headers, client: forwardedClient(headers, to.peer()), peer: to.peer() });
      if (isDeny(route)) {
        answerSink(route, parsed, to);
        return refused(x, route, parsed);
      }
      void decider.decideAndAnswer('http_authz', route, to, signalOf, answerSink, x);
    },
  };
}

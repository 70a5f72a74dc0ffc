import type { SandboxAccess } from './access-policy.js';
import { isPreflight, preflightAnswer } from './cors.js';
import { e2bStatus, E2B_PAUSED_MESSAGE, isE2bAddressed } from './e2b-answers.js';
import { ERROR_CODES, type ErrorCode } from './errors.js';
import { parseRoute, parseTunnelAuthority, type RouteOptions, type RouteParse, type RouteRequest, type RouteTarget } from './route-key.js';
import type { PublicPhase, PublicStatus } from './sandbox.js';

/**
 * `decide(request)`: the one routing decision every front door makes. Pure and synchronous: it reads the
 * route table (the view) and nothing else.
 */

/** What decide() needs to know of one sandbox. The view keeps these precomputed. */
export interface RouteEntry {
  /** `<namespace>/<name>`. */
  readonly key: string;
  readonly namespace: string;
  readonly name: string;
  /** The incarnation (a sandbox deleted and re-created under the same name has another). */
  readonly uid: string;
  readonly status: PublicStatus;
  /** Host part of the upstream (an IP, `[v6]`, or a DNS name); undefined when the sandbox has no inbound network. */
  readonly upstreamHost: string | undefined;
  /** Allowed ports; undefined = any. */
  readonly ports: ReadonlySet<number> | undefined;
  /** Ports that speak h2c (HTTP/2 with prior knowledge); undefined = none. */
  readonly h2cPorts: ReadonlySet<number> | undefined;
  /** Ports that carry raw TCP through a tunnel; undefined = none. */
  readonly tcpPorts: ReadonlySet<number> | undefined;
  /** Ports that need no credential (the snapshot's `publicPorts`); undefined = none. */
  readonly publicPorts: ReadonlySet<number> | undefined;
  /**
   * For a sandbox with no inbound network ("relay only"): the gateway holding its supervisor session,
   * whose relay listener carries the traffic over that session. Undefined otherwise.
   */
  readonly relayOwner: string | undefined;
  /** The traffic token requests must present (constant-time compared); undefined = none required. */
  readonly accessToken: string | undefined;
  /** The in-sandbox daemon's token, when the driver knows it (checked at the edge if presented). */
  readonly envdAccessToken: string | undefined;
  /** The sandbox's own access policy (domain/access-policy.ts); undefined = its namespace's. */
  readonly access: SandboxAccess | undefined;
}

export interface RouteTable {
  /** False until every driver has delivered its first full list. */
  readonly synced: boolean;
  get(namespace: string, name: string): RouteEntry | undefined;
  /** Resolves an opaque id (a sandbox's `id`, or the legacy `<namespace>--<name>`). */
  getById(id: string): RouteEntry | undefined;
  /** `host:port` of a gateway's relay listener (from its lease), if it is live and has one. */
  relayAddress(gatewayId: string): string | undefined;
}

/**
 * An access check around the view lookup (domain/access.ts builds one per request): `before` runs on the
 * parsed target, `after` right after the sandbox is found and before anything about it is revealed — so
 * a denial for another tenant's sandbox can be the very answer a missing sandbox gets.
 */
export interface Access {
  /** The policy rule that let the request in (`keys`, `jwt`), set by `after`; undefined until then. */
  granted?: string | undefined;
  before(target: RouteTarget): Deny | undefined;
  after(entry: RouteEntry, target: RouteTarget): Deny | undefined;
  /**
   * For a public port, which needs no credential: an answer the credential presented still calls for (a
   * link's token is taken out of the URL), or undefined to go on. Absent = go on.
   */
  public?(entry: RouteEntry, target: RouteTarget): Deny | undefined;
}

export interface Allow {
  readonly allow: true;
  /** `<host>:<port>` to send the request to. */
  readonly upstream: string;
  /** True when `upstream` is a gateway's relay listener, not the sandbox itself. */
  readonly relay: boolean;
  readonly entry: RouteEntry;
  readonly target: RouteTarget;
  /** The access policy rule that let the request in: `public`, `keys`, `jwt`; undefined when no check ran. */
  readonly policy?: string | undefined;
}

export interface Deny {
  readonly allow: false;
  readonly code: ErrorCode;
  readonly status: number;
  readonly message: string;
  readonly namespace?: string | undefined;
  readonly name?: string | undefined;
  readonly phase?: PublicPhase | undefined;
  readonly reason?: string | undefined;
  /** Seconds, for 503s that are worth retrying. */
  readonly retryAfter?: number | undefined;
  /** True when the sandbox is in a readiness gap: a door may wait for the view to change and decide again. */
  readonly waitable: boolean;
  /**
   * Set for a browser navigation to a sandbox that is still starting (a wake past its budget): the HTML
   * answer is a "starting…" page that reloads itself after `retryAfter` seconds.
   */
  readonly starting?: boolean | undefined;
  /** Response headers the answer carries besides its own (a link's redirect: Location, Set-Cookie). */
  readonly headers?: readonly (readonly [string, string])[] | undefined;
}

export type Decision = Allow | Deny;

const RETRY_AFTER_SECONDS = 1;

const GATEWAY_NOT_READY: Deny = deny('gateway_not_ready', undefined, undefined, RETRY_AFTER_SECONDS);
/** The one answer for a sandbox that does not exist — or that the caller may not know exists. */
export const NOT_FOUND: Deny = deny('sandbox_not_found');
const NOT_FOUND_E2B: Deny = { ...NOT_FOUND, status: 502 };
const GATEWAY_NOT_READY_E2B: Deny = { ...GATEWAY_NOT_READY, status: 429 };
const NO_ROUTE: Deny = deny('invalid_route', 'The request names no sandbox: use a sandbox host, the x-sandbox-* headers or the E2B headers');

/** A denial the door answers as it is. */
export function deny(code: ErrorCode, message?: string, entry?: RouteEntry, retryAfter?: number): Deny {
  return denial(code, message, entry, retryAfter, false);
}

/** `sandbox_not_ready`: the one denial a door may hold in a readiness wait (edge/decider.ts) before answering. */
function notReady(entry: RouteEntry): Deny {
  return denial('sandbox_not_ready', entry.status.message || undefined, entry, RETRY_AFTER_SECONDS, true);
}

function denial(code: ErrorCode, message: string | undefined, entry: RouteEntry | undefined, retryAfter: number | undefined, waitable: boolean): Deny {
  return {
    allow: false,
    code,
    status: ERROR_CODES[code].status,
    message: message ?? ERROR_CODES[code].message,
    namespace: entry?.namespace,
    name: entry?.name,
    phase: entry?.status.phase,
    reason: entry?.status.reason,
    retryAfter,
    waitable,
  };
}

/** Formats `host:port` for an upstream host; IPv6 literals are bracketed by the view already. */
export function upstreamOf(host: string, port: number): string {
  return host + ':' + port;
}

function lookup(table: RouteTable, t: RouteTarget): RouteEntry | undefined {
  return t.id !== undefined ? table.getById(t.id) : table.get(t.namespace!, t.name!);
}

/**
 * A denial as the client that named `t` must read it: E2B-addressed requests get the statuses the E2B
 * SDK understands (domain/e2b-answers.ts). The missing-sandbox answer stays one constant object, so
 * another tenant's sandbox still reads exactly like a missing one.
 */
export function answerFor(t: RouteTarget, d: Deny): Deny {
  if (!isE2bAddressed(t)) return d;
  const status = e2bStatus(d.code);
  if (status === undefined || status === d.status) return d;
  if (d === NOT_FOUND) return NOT_FOUND_E2B;
  if (d === GATEWAY_NOT_READY) return GATEWAY_NOT_READY_E2B;
  return { ...d, status, message: d.code === 'sandbox_paused' ? E2B_PAUSED_MESSAGE : d.message };
}

/**
 * Decides for an already-parsed target. `req`, when given, is the request itself: a CORS preflight the
 * access check or the lookup refuses gets the gateway's preflight answer instead (domain/cors.ts).
 */
export function decideTarget(table: RouteTable, t: RouteTarget, access?: Access, e2bAnswers = true, req?: RouteRequest): Decision {
  const d = decideFor(table, t, access, req);
  return d.allow || !e2bAnswers ? d : answerFor(t, d);
}

/** True when `port` of `entry` needs no credential. */
export function isPublicPort(entry: RouteEntry, port: number): boolean {
  return entry.publicPorts !== undefined && entry.publicPorts.has(port);
}

/** A refusal by the access check or the lookup, as `req` gets it: a preflight gets the gateway's answer. */
function refusal(d: Deny, req: RouteRequest | undefined): Deny {
  return req !== undefined && isPreflight(req) ? preflightAnswer(req) : d;
}

function decideFor(table: RouteTable, t: RouteTarget, access?: Access, req?: RouteRequest): Decision {
  // The lookup comes first even when the access check refuses up front: a public port needs no credential.
  // Such a refusal does not depend on the target, so the answer still reveals nothing but a public port.
  const early = access?.before(t);
  const entry = lookup(table, t);
  let policy: string | undefined;
  if (entry !== undefined && isPublicPort(entry, t.port)) {
    const answer = access?.public?.(entry, t);
    if (answer !== undefined) return answer;
    policy = 'public';
  } else {
    if (early !== undefined) return refusal(early, req);
    if (entry === undefined) return refusal(NOT_FOUND, req);
    if (access !== undefined) {
      const refused = access.after(entry, t);
      if (refused !== undefined) return refusal(refused, req);
      policy = access.granted;
    }
  }
  if (entry.ports !== undefined && !entry.ports.has(t.port)) {
    return deny('port_not_allowed', `Port ${t.port} is not exposed by this sandbox`, entry);
  }
  // A tunnel opens only a port declared TCP: refused before any wait or wake it would set off.
  if (req?.tunnel === true && (entry.tcpPorts === undefined || !entry.tcpPorts.has(t.port))) return deny('port_not_tcp', undefined, entry);
  // No door carries a WebSocket to an h2c port; refused before any wait or resume it would set off.
  if (entry.h2cPorts !== undefined && req !== undefined && entry.h2cPorts.has(t.port) && isUpgrade(req)) return deny('upgrade_not_supported', undefined, entry);
  switch (entry.status.phase) {
    case 'Ready': {
      if (entry.upstreamHost !== undefined) return { allow: true, upstream: upstreamOf(entry.upstreamHost, t.port), relay: false, entry, target: t, policy };
      const relay = entry.relayOwner === undefined ? undefined : table.relayAddress(entry.relayOwner);
      if (relay === undefined) return deny('sandbox_unreachable', undefined, entry);
      return { allow: true, upstream: relay, relay: true, entry, target: t, policy };
    }
    case 'Paused':
      return deny('sandbox_paused', undefined, entry);
    case 'Deleting':
      return deny('sandbox_gone', undefined, entry);
    case 'Error':
      return deny('sandbox_failed', entry.status.message || undefined, entry);
    default:
      return notReady(entry);
  }
}

/** A WebSocket: an HTTP/1.1 upgrade (Envoy presents an HTTP/2 extended CONNECT as one), or an extended CONNECT (RFC 8441). */
export function isUpgrade(req: RouteRequest): boolean {
  return req.headers.upgrade !== undefined || req.headers[':protocol'] !== undefined;
}

/**
 * The target a request names: a tunnel's from its authority — any authority that is no sandbox's reads as
 * a missing sandbox, so a tunnel is never opened to an address a client chooses — else by the route sources.
 */
export function routeOf(req: RouteRequest, opts: RouteOptions): RouteParse {
  return req.tunnel === true ? parseTunnelAuthority(req.host, opts) : parseRoute(req, opts);
}

/** Parses the route and decides. Never throws for any input. */
export function decide(table: RouteTable, opts: RouteOptions, req: RouteRequest, access?: Access): Decision {
  const t = routeOf(req, opts);
  const e2bAnswers = opts.e2bAnswers !== false;
  if (!table.synced) return typeof t === 'object' && e2bAnswers ? answerFor(t, GATEWAY_NOT_READY) : GATEWAY_NOT_READY;
  if (t === undefined) return req.tunnel === true ? NOT_FOUND : NO_ROUTE;
  if (typeof t === 'string') return deny('invalid_route', t);
  return decideTarget(table, t, access, e2bAnswers, req);
}

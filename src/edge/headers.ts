import type { Allow } from '../domain/decide.js';
import { mayHoldLinkCookie, withoutLinkCookie } from '../domain/link-cookie.js';
import { ROUTING_HEADERS, type HeaderMap } from '../domain/route-key.js';
import type { RelayCredentials } from './relay/relay-credential.js';
import { relayHeaders } from './relay/relay-headers.js';

/** Header handling shared by the front doors. */

function hasUpper(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0x41 && c <= 0x5a) return true;
  }
  return false;
}

/**
 * Returns `headers` itself when every name is lower case (Envoy always sends lower case), else a copy
 * with lower-cased names in which names that differ only in case are joined with "," — so a conflicting
 * pair such as `X-Sandbox-Id: a` + `x-sandbox-id: b` becomes one invalid value, never a silent pick.
 */
export function lowerCaseHeaders(headers: Readonly<Record<string, string>>): HeaderMap {
  let clean = true;
  for (const k in headers) {
    if (hasUpper(k)) {
      clean = false;
      break;
    }
  }
  if (clean) return headers;
  const out: Record<string, string> = {};
  for (const k in headers) addHeader(out, k.toLowerCase(), headers[k]!);
  return out;
}

/**
 * Adds one header to a lower-case map, joining repeats with "," as Envoy's ext_authz map does — except
 * `cookie`, whose repeats (HTTP/2 sends one field per cookie) join with "; " (RFC 9113 §8.2.3), so a
 * comma inside a cookie's value never reads as a separator.
 */
export function addHeader(out: Record<string, string>, lowerName: string, value: string): void {
  const prev = out[lowerName];
  out[lowerName] = prev === undefined ? value : prev + (lowerName === 'cookie' ? '; ' : ',') + value;
}

/** What the Envoy doors and HTTP authz tell the data plane about headers. */
export interface DoorOptions {
  /** The header that carries the decided upstream (always overwritten, never taken from a client). */
  readonly upstreamHeader: string;
  /** Lower-case request headers never forwarded to a sandbox: the routing headers plus credentials. */
  readonly removeHeaders: ReadonlySet<string>;
  /** Mints the target-bound credential a relay decision carries to a relay listener (docs/relay.md). */
  readonly relay: RelayCredentials;
  /** Signed links are on: sandgate's session cookie is taken out of the `Cookie` the sandbox gets. */
  readonly linkCookie?: boolean | undefined;
}

/**
 * The `Cookie` header an allowed request must reach the sandbox with, when it carries sandgate's link
 * cookie: the sandbox's own cookies, byte for byte (`''`: none left, remove the header); undefined when
 * nothing changes.
 */
export function cookieForSandbox(opts: DoorOptions, headers: HeaderMap): string | undefined {
  if (opts.linkCookie !== true) return undefined;
  const cookie = headers.cookie;
  if (!mayHoldLinkCookie(cookie)) return undefined;
  const kept = withoutLinkCookie(cookie);
  return kept === cookie ? undefined : kept;
}

/**
 * The credential headers no sandbox gets: `--strip-credentials`, and `Authorization` whenever workload JWTs
 * are on (a verified token never reaches the sandbox, whatever the list says).
 */
export function strippedCredentials(stripCredentials: readonly string[], jwt: boolean): readonly string[] {
  return jwt && !stripCredentials.some((h) => h.toLowerCase() === 'authorization') ? [...stripCredentials, 'authorization'] : stripCredentials;
}

/** The routing headers, plus `credentials`: what a door removes before a request reaches the sandbox. */
export function removedHeaders(credentials: readonly string[]): ReadonlySet<string> {
  return new Set([...ROUTING_HEADERS, ...credentials.map((h) => h.toLowerCase())]);
}

/** Every request header with this prefix is the gateways' own namespace: never passed on from a client (docs/tenancy.md). */
export const GATEWAY_HEADER_PREFIX = 'x-sandgate-';

/**
 * The request headers a door tells Envoy to remove before the sandbox sees the request: those of `names`
 * present (routing headers, credentials), plus every client-sent `x-sandgate-*` header — a sandbox may
 * trust the gateways' namespace — except the ones this answer sets itself (`set`, which it overwrites).
 * One pass over the request's headers, in their order; no allocation when there is nothing to remove.
 */
export function headersToRemove(headers: HeaderMap, names: ReadonlySet<string>, set: readonly string[]): string[] | undefined {
  let out: string[] | undefined;
  for (const k in headers) {
    if (names.has(k) || (k.startsWith(GATEWAY_HEADER_PREFIX) && !set.includes(k))) (out ??= []).push(k);
  }
  return out;
}

/**
 * The client's address as the door's caller reports it: the last `x-forwarded-for` entry (the one Envoy
 * appends with `use_remote_address`, and nginx with `$proxy_add_x_forwarded_for`), else `peer`.
 */
export function forwardedClient(headers: HeaderMap, peer: string): string {
  const xff = headers['x-forwarded-for'];
  if (xff === undefined) return peer;
  const last = xff.slice(xff.lastIndexOf(',') + 1).trim();
  return last === '' ? peer : last;
}

/**
 * Set to `h2c` on an allow whose port is declared h2c (`h2cPorts`): the shipped Envoy configs route such a
 * request to a cluster that speaks HTTP/2 (`sandbox_upstream_h2c`, or `relay_upstream_h2c` for a relay
 * decision over TLS). Envoy
 * removes any client copy before the decision (docs/envoy.md), and every door overwrites or removes it.
 */
export const UPSTREAM_PROTOCOL_HEADER = 'x-sandgate-upstream-protocol';

/**
 * True when Envoy must speak h2c to `d.upstream`: a decision for a port declared h2c, whether its upstream
 * is the sandbox or (a relay decision) the relay listener of the gateway holding its session, which takes
 * HTTP/2 for h2c ports (docs/relay.md). One Set lookup, no allocation.
 */
export function upstreamIsH2c(d: Allow): boolean {
  return d.entry.h2cPorts?.has(d.target.port) === true;
}

/** How a door names what an allow sets beyond the upstream: the rewritten path, and (HTTP authz) the sandbox. */
export interface AllowNames {
  /** `:path` at the Envoy doors (they rewrite the request), `x-sandgate-path` at HTTP authz (copied upstream). */
  readonly path: string;
  /** HTTP authz names the sandbox (`x-sandgate-sandbox`); undefined elsewhere. */
  readonly sandbox?: string | undefined;
}

/** The request header changes of an allow: `set` a flat name, value, … list; `remove` lower-case names. */
export interface AllowChanges {
  readonly set: string[];
  readonly remove: string[] | undefined;
}

/**
 * The request header changes an allow makes, the same at every door (each only encodes them): set the
 * upstream header, the sandbox (HTTP authz), the rewritten path, `h2c` for an h2c port, a relay decision's
 * target and fresh credential, and the sandbox's own cookies when sandgate's was taken out of `Cookie`;
 * remove the routing headers and credentials present, every client-sent `x-sandgate-*` header this answer
 * does not set, and `Cookie` when it held only sandgate's cookie.
 */
export function allowChanges(d: Allow, opts: DoorOptions, headers: HeaderMap, names: AllowNames): AllowChanges {
  const set = [opts.upstreamHeader, d.upstream];
  if (names.sandbox !== undefined) set.push(names.sandbox, d.entry.key);
  if (d.target.path !== undefined) set.push(names.path, d.target.path);
  if (upstreamIsH2c(d)) set.push(UPSTREAM_PROTOCOL_HEADER, 'h2c');
  for (const [k, v] of relayHeaders(d, opts.relay)) set.push(k, v);
  // `set` serves as the list of names set here: its values (an address, ns/name, a path, `h2c`, a
  // credential, a target) never start with x-sandgate-. The cookie is added after, so its text never counts.
  let remove = headersToRemove(headers, opts.removeHeaders, set);
  const cookie = cookieForSandbox(opts, headers);
  if (cookie === '') (remove ??= []).push('cookie');
  else if (cookie !== undefined) set.push('cookie', cookie);
  return { set, remove };
}

import type { Deny } from './decide.js';
import { ERROR_CODES } from './errors.js';
import type { RouteRequest } from './route-key.js';

/**
 * CORS preflights to private ports (docs/links.md, "CORS"). A browser sends a preflight (`OPTIONS` with
 * `Origin` and `Access-Control-Request-Method`, Fetch standard §4.8) before a cross-origin request it may
 * not send unasked, and never puts credentials on it: no cookie, no API key, no traffic token. A private
 * port's preflight is therefore answered by the gateway, never forwarded unauthenticated to the sandbox.
 *
 * The answer allows any origin (`*`), the usual methods and the headers asked for, and never credentials:
 * a page that holds a key or token may send it in a header (what a non-browser client can do anyway),
 * while a request that relies on sandgate's cookie (`credentials: 'include'`) fails its preflight, since a
 * browser refuses `*` with credentials. So no page on another origin gets a credentialed non-simple request
 * through on a link's cookie. The answer depends only on the preflight's own headers: for a missing
 * sandbox, another tenant's and an existing private one it is the same bytes.
 */

/** True for a CORS preflight. */
export function isPreflight(req: RouteRequest): boolean {
  return req.method === 'OPTIONS' && req.headers.origin !== undefined && req.headers['access-control-request-method'] !== undefined;
}

const METHODS = 'GET, HEAD, POST, PUT, PATCH, DELETE';
/** Seconds a browser may cache the answer (Chromium caps it at 7200). */
const MAX_AGE = '600';
/** A comma-separated list of header names (RFC 9110 tokens); longer lists are not echoed. */
const HEADER_LIST = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+(?:[ \t]*,[ \t]*[!#$%&'*+.^_`|~0-9A-Za-z-]+)*$/;
const MAX_HEADER_LIST = 1024;

const BASE: readonly (readonly [string, string])[] = [
  ['access-control-allow-origin', '*'],
  ['access-control-allow-methods', METHODS],
  ['access-control-max-age', MAX_AGE],
  ['vary', 'Access-Control-Request-Headers'],
];

// Built here rather than with decide.ts's deny(): decide.ts imports this module.
const ANSWER: Deny = { allow: false, code: 'cors_preflight', status: ERROR_CODES.cors_preflight.status, message: ERROR_CODES.cors_preflight.message, waitable: false, headers: BASE };

/** The gateway's answer to a preflight it does not forward: 204 and the allow set, no body. */
export function preflightAnswer(req: RouteRequest): Deny {
  const asked = req.headers['access-control-request-headers'];
  if (asked === undefined || asked.length > MAX_HEADER_LIST || !HEADER_LIST.test(asked)) return ANSWER;
  return { ...ANSWER, headers: [...BASE, ['access-control-allow-headers', asked]] };
}

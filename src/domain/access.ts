import { createHash, timingSafeEqual } from 'node:crypto';
import { deny, NOT_FOUND, type Access, type Deny, type RouteEntry } from './decide.js';
import type { RouteTarget } from './route-key.js';
import { allowsKeys, DEFAULT_POLICIES, policyFor, type NamespacePolicies } from './access-policy.js';

/**
 * Tenancy and traffic auth, as a pure check the decision runs around the view lookup.
 *
 * Teams are namespaces. A request carries no API key (anonymous), a valid one (a team, or the admin team
 * that reaches every namespace), or an invalid one (unknown or revoked). The rule that matters: a team
 * can never reach, nor detect, another team's sandbox — its request for one gets exactly the answer a
 * missing sandbox gets (`NOT_FOUND`, the same constant object), decided by the same map lookup and string
 * compare, so neither body nor timing class differs. Answers that do not depend on the target (no key
 * where one is needed, an invalid key) are decided before the lookup, so they reveal nothing either
 * (decide.ts still looks up: a sandbox's public ports need no credential at all, and answer the same to all).
 */

export type Principal =
  | { readonly kind: 'anonymous' }
  | { readonly kind: 'invalid' }
  | { readonly kind: 'team'; readonly team: string }
  | { readonly kind: 'admin' };

export const ANONYMOUS: Principal = { kind: 'anonymous' };
export const INVALID_KEY: Principal = { kind: 'invalid' };
export const ADMIN: Principal = { kind: 'admin' };

/** Which namespaces require an API key. */
export interface KeyPolicy {
  readonly all: boolean;
  readonly namespaces: ReadonlySet<string>;
}

export const NO_KEYS_REQUIRED: KeyPolicy = { all: false, namespaces: new Set() };

const API_KEY_REQUIRED = deny('api_key_required');
const API_KEY_INVALID = deny('api_key_invalid');
const TOKEN_REQUIRED = deny('token_required');
const TOKEN_INVALID = deny('token_invalid');
const ENVD_TOKEN_INVALID = deny('envd_token_invalid');
const ACCESS_DENIED = deny('access_denied');
const CREDENTIAL_REQUIRED = deny('credential_required');

/**
 * What a request presented for the in-sandbox daemon (E2B envd): its `X-Access-Token`, and envd's port
 * (0 = no envd semantics: every port, envd's included, needs the traffic token).
 */
export interface EnvdCheck {
  readonly token: string | undefined;
  readonly port: number;
}

export const NO_ENVD_CHECK: EnvdCheck = { token: undefined, port: 0 };

function digest(s: string): Buffer {
  return createHash('sha256').update(s).digest();
}

/** Compares two secrets in constant time (over their SHA-256, so lengths leak nothing either). */
export function safeEqual(a: string, b: string): boolean {
  return timingSafeEqual(digest(a), digest(b));
}

/**
 * The access check for one request: who is asking (`principal`), which namespaces need a key, the
 * traffic token the request presented (if any), and its envd token.
 *
 * The envd token is the sandbox daemon's own credential, checked by the daemon: the edge refuses only a
 * token that is present and wrong for a sandbox whose token the driver knows (so a wrong token never
 * reaches the sandbox), and leaves a missing one for the daemon to judge (its `/health` needs none).
 */
export function accessFor(principal: Principal, policy: KeyPolicy, presentedToken: string | undefined, envd: EnvdCheck = NO_ENVD_CHECK, policies: NamespacePolicies = DEFAULT_POLICIES): Access {
  return {
    granted: undefined,
    before(t: RouteTarget): Deny | undefined {
      switch (principal.kind) {
        case 'invalid':
          return API_KEY_INVALID;
        case 'anonymous':
          if (policy.all || (t.namespace !== undefined && policy.namespaces.has(t.namespace))) return API_KEY_REQUIRED;
          return undefined;
        case 'team':
          return t.namespace !== undefined && t.namespace !== principal.team ? NOT_FOUND : undefined;
        case 'admin':
          return undefined;
      }
    },
    after(entry: RouteEntry, t: RouteTarget): Deny | undefined {
      // An id names no namespace up front: the tenant check happens here, answering as for a missing sandbox.
      if (principal.kind === 'team' && entry.namespace !== principal.team) return NOT_FOUND;
      if (principal.kind === 'anonymous' && policy.namespaces.has(entry.namespace)) return NOT_FOUND;
      // The port's policy must allow today's credentials: a caller who may know the sandbox exists (its own
      // team's) is told it is refused; one who presented nothing, that another credential is needed.
      if (!allowsKeys(policyFor(entry.access, entry.namespace, t.port, policies))) return principal.kind === 'anonymous' ? CREDENTIAL_REQUIRED : ACCESS_DENIED;
      const want = entry.accessToken;
      // The envd port answers to envd's own token (E2B's model: the traffic token guards user ports).
      if (want !== undefined && t.port !== envd.port) {
        if (presentedToken === undefined) return TOKEN_REQUIRED;
        if (!safeEqual(presentedToken, want)) return TOKEN_INVALID;
      }
      const envdWant = entry.envdAccessToken;
      if (envdWant !== undefined && envd.token !== undefined && t.port === envd.port && !safeEqual(envd.token, envdWant)) return ENVD_TOKEN_INVALID;
      this.granted = 'keys';
      return undefined;
    },
  };
}

/**
 * A link's check (domain/link.ts) under the port's policy: a link is one of today's credentials (`keys`),
 * so a port whose policy leaves them out refuses it — to a holder who may know the sandbox exists.
 * `fallback` is the check the link's own falls back to (for a port no cookie is for): when that check let
 * the request in, it has applied the policy itself.
 */
export function linkUnderPolicy(link: Access, fallback: Access | undefined, policies: NamespacePolicies): Access {
  return {
    granted: undefined,
    before: (t) => link.before(t),
    after(entry: RouteEntry, t: RouteTarget): Deny | undefined {
      const d = link.after(entry, t);
      if (d !== undefined && d.code !== 'link_accepted') return d;
      if (fallback?.granted !== undefined) {
        this.granted = fallback.granted;
        return d;
      }
      if (!allowsKeys(policyFor(entry.access, entry.namespace, t.port, policies))) return ACCESS_DENIED;
      this.granted = 'keys';
      return d;
    },
    public: link.public === undefined ? undefined : (entry, t) => link.public!(entry, t),
  };
}

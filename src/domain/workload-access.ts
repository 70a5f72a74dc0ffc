import { claimsMatch, namesIssuer, policyFor, type NamespacePolicies } from './access-policy.js';
import { deny, NOT_FOUND, type Access, type Deny, type RouteEntry } from './decide.js';
import type { RouteTarget } from './route-key.js';

/**
 * The access check for a request carrying a workload JWT (auth/workload-jwt.ts verified it).
 *
 * A workload belongs to one team (its issuer maps a claim, or the issuer itself, to a namespace): every
 * other team's sandbox answers exactly as a missing one. In its own namespace, the token is a credential
 * only on a port whose policy names its issuer; there a rule must also match its audience and claims, or
 * the answer is `access_denied`. On any other port the token is no credential: the request is judged as
 * if it carried none (`fallback`, the anonymous check).
 */

export interface Workload {
  readonly issuer: string;
  readonly team: string;
  readonly subject: string;
  readonly audiences: readonly string[];
  readonly claims: Readonly<Record<string, unknown>>;
}

/** A token from a configured issuer: verified, or refused (bad signature, expired, wrong audience, …). */
export type PresentedJwt = { readonly ok: true; readonly workload: Workload } | { readonly ok: false; readonly issuer: string; readonly reason: string };

const ACCESS_DENIED = deny('access_denied');

export function workloadAccess(jwt: PresentedJwt, fallback: Access, policies: NamespacePolicies): Access {
  // A refused token says nothing of any sandbox: answered before the lookup, like an invalid API key.
  const refused: Deny | undefined = jwt.ok ? undefined : deny('jwt_invalid', `The workload token is not valid: ${jwt.reason}`);
  return {
    granted: undefined,
    before(t: RouteTarget): Deny | undefined {
      if (refused !== undefined) return refused;
      const w = (jwt as { workload: Workload }).workload;
      return t.namespace !== undefined && t.namespace !== w.team ? NOT_FOUND : undefined;
    },
    after(entry: RouteEntry, t: RouteTarget): Deny | undefined {
      const w = (jwt as { workload: Workload }).workload;
      if (entry.namespace !== w.team) return NOT_FOUND;
      const policy = policyFor(entry.access, entry.namespace, t.port, policies);
      if (!namesIssuer(policy, w.issuer)) {
        const d = fallback.before(t) ?? fallback.after(entry, t);
        this.granted = fallback.granted;
        return d;
      }
      for (const r of policy) {
        if (r.kind !== 'jwt' || r.issuer !== w.issuer) continue;
        if (r.audience !== undefined && !w.audiences.includes(r.audience)) continue;
        if (!claimsMatch(r.claims, w.claims)) continue;
        this.granted = 'jwt';
        return undefined;
      }
      return ACCESS_DENIED;
    },
  };
}

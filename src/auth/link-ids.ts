import { randomBytes } from 'node:crypto';
import { isDnsLabel } from '../domain/labels.js';

/**
 * A link's id (its `jti`) names the namespace it opens and when it expires:
 * `l_<namespace>_<exp in base 36>_<16 random base64url characters>` (96 random bits). Revoking by id then
 * needs no record of minted links: the operator API tells from the id alone whether the caller may revoke
 * it, and the revocation lasts until the link's own expiry. A forged id names what it claims but matches
 * no link: the random part is what a real link's id has and a guess does not. Ids of other shapes (links
 * minted outside sandgate) name nothing; only the admin team revokes them.
 */

const SHAPE = /^l_([a-z0-9-]{1,63})_([0-9a-z]{1,11})_[A-Za-z0-9_-]{16}$/;

/** A new link id for a link to `namespace` expiring at `exp` (epoch seconds). */
export function newLinkId(namespace: string, exp: number): string {
  return `l_${namespace}_${exp.toString(36)}_${randomBytes(12).toString('base64url')}`;
}

/** The namespace and expiry (epoch seconds) an id names; undefined when it is not of that shape. */
export function linkIdScope(id: string): { readonly namespace: string; readonly exp: number } | undefined {
  const m = SHAPE.exec(id);
  if (m === null || !isDnsLabel(m[1]!)) return undefined;
  const exp = parseInt(m[2]!, 36);
  return Number.isSafeInteger(exp) ? { namespace: m[1]!, exp } : undefined;
}

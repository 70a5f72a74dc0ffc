/**
 * The rules of sandbox ids (the opaque names of E2B-style hosts and headers), shared by the view's index
 * and its tests. Pure.
 *
 * Two kinds of id name a sandbox:
 * - the **legacy id** `<namespace>--<name>` (OpenKruise's convention), which every sandbox has implicitly
 *   and which names its namespace: it is valid for that one sandbox only, so a sandbox declaring another
 *   namespace's legacy id is refused it;
 * - **declared ids** (`ids` of a snapshot: a file entry, a gRPC driver, the `sandgate.dev/id` annotation or
 *   OpenKruise's sandbox-id label — things a tenant may control). One id names one sandbox: when several
 *   declare it, the first claimant keeps it and the others are refused it.
 *
 * "First" is an order on the claimants themselves — creation time, then namespace, then name — never the
 * order events arrived in, so every gateway resolves an id to the same sandbox whatever order its drivers
 * reported in, and keeps doing so across restarts.
 */

/** The legacy id of a sandbox. */
export function legacyId(namespace: string, name: string): string {
  return namespace + '--' + name;
}

/**
 * True when `id` reads as `<namespace>--<name>` for some split: a `--` with text on both sides. Such an id
 * is only ever resolved as a legacy id, and only a sandbox whose own legacy id it is may declare it.
 */
export function hasLegacyForm(id: string): boolean {
  const i = id.indexOf('--', 1);
  return i > 0 && i + 2 < id.length;
}

/** What decides who claimed an id first. */
export interface IdClaimant {
  readonly namespace: string;
  readonly name: string;
  /** Epoch ms the sandbox was created (Kubernetes metadata.creationTimestamp); undefined when unknown. */
  readonly createdAt?: number | undefined;
}

/**
 * Orders claimants of one id: the earliest created first; a sandbox of unknown age after every sandbox of
 * known age (it cannot show it came first); ties broken by namespace, then name — unique in the view, so
 * the order is total and the same on every gateway.
 */
export function compareClaimants(a: IdClaimant, b: IdClaimant): number {
  if (a.createdAt !== b.createdAt) {
    if (a.createdAt === undefined) return 1;
    if (b.createdAt === undefined) return -1;
    return a.createdAt - b.createdAt;
  }
  if (a.namespace !== b.namespace) return a.namespace < b.namespace ? -1 : 1;
  if (a.name !== b.name) return a.name < b.name ? -1 : 1;
  return 0;
}

const NO_IDS = Object.freeze({ claims: Object.freeze([]) as readonly string[], foreign: Object.freeze([]) as readonly string[] });

function allPlainAndDistinct(ids: readonly string[]): boolean {
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i]!;
    if (hasLegacyForm(id)) return false;
    for (let j = 0; j < i; j++) if (ids[j] === id) return false;
  }
  return true;
}

export type IdRefusal = 'in_use' | 'names_another_sandbox';

/**
 * Splits a sandbox's declared ids: `claims` are the ids it competes for in the index (no legacy form, no
 * duplicates), `foreign` the legacy-form ids that name another sandbox (refused outright). Its own legacy
 * id, declared explicitly, is neither: it resolves as a legacy id already.
 */
export function classifyIds(namespace: string, name: string, ids: readonly string[]): { claims: readonly string[]; foreign: readonly string[] } {
  if (ids.length === 0) return NO_IDS;
  // The common case, every id a distinct plain claim: `ids` itself is the claim list (the view keeps it for
  // every sandbox, so a copy would cost a million arrays at a million sandboxes).
  if (allPlainAndDistinct(ids)) return { claims: ids, foreign: NO_IDS.foreign };
  const claims: string[] = [];
  const foreign: string[] = [];
  const own = legacyId(namespace, name);
  for (const id of ids) {
    if (!hasLegacyForm(id)) {
      if (!claims.includes(id)) claims.push(id);
    } else if (id !== own && !foreign.includes(id)) {
      foreign.push(id);
    }
  }
  return { claims, foreign };
}

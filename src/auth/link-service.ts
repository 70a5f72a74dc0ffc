import { SandgateError } from '../domain/errors.js';
import { LINK_PARAM, type LinkOrder } from '../domain/link.js';
import type { RouteOptions } from '../domain/route-key.js';
import { LINK_ID, type ApiKeyStore } from './api-keys.js';
import { linkIdScope } from './link-ids.js';
import type { LinkKeySet } from './link-keys.js';
import { mintLinkToken } from './link-tokens.js';

/**
 * Minting and revoking links for the operator API and the CLI: the token (link-tokens.ts) inside the URL
 * a browser opens — the host form `<port>-<name>.<namespace>.<base-domain>`, or the path form
 * `<base-domain>/<prefix>/<namespace>/<name>/<port>/…` when `--path-prefix` is set.
 */

export interface LinkUrlOptions {
  readonly scheme: string;
  /** 0: the scheme's default. */
  readonly port: number;
  readonly route: Pick<RouteOptions, 'baseDomain' | 'pathPrefix'>;
}

/** The URL of a sandbox port's path carrying `token`. */
export function linkUrl(o: LinkUrlOptions, namespace: string, name: string, port: number, path: string, token: string): string {
  const authorityPort = o.port === 0 ? '' : `:${o.port}`;
  const base = o.route.pathPrefix === '' ? `${o.scheme}://${port}-${name}.${namespace}.${o.route.baseDomain}${authorityPort}` : `${o.scheme}://${o.route.baseDomain}${authorityPort}/${o.route.pathPrefix}/${namespace}/${name}/${port}`;
  return `${base}${path}?${LINK_PARAM}=${token}`;
}

/** Default lifetime of a link minted without one: 15 minutes, or the maximum when that is shorter. */
const DEFAULT_TTL_SECONDS = 900;

export class LinkService {
  constructor(
    private readonly keys: () => LinkKeySet,
    private readonly store: ApiKeyStore | undefined,
    private readonly maxTtlSeconds: number,
    private readonly bounds: RevocationBounds,
    private readonly url: LinkUrlOptions,
    private readonly now: () => number = Date.now,
  ) {}

  async mint(o: LinkOrder): Promise<{ url: string; expiresAt: string; id: string }> {
    const ttlSeconds = o.ttlSeconds ?? Math.min(DEFAULT_TTL_SECONDS, this.maxTtlSeconds);
    const path = o.path ?? '/';
    const m = await mintLinkToken(this.keys(), { ...o, path, ttlSeconds }, this.maxTtlSeconds, this.now());
    return { url: linkUrl(this.url, o.namespace, o.name, o.port, path, m.token), expiresAt: new Date(m.exp * 1000).toISOString(), id: m.id };
  }

  /** Revokes a link by id on every gateway sharing the store, if `caller` may (revokeLinkIn). */
  async revoke(id: string, caller: RevokingCaller): Promise<void> {
    if (this.store === undefined) throw new SandgateError('invalid_request', 'revoking links needs a shared store: set --api-keys FILE|redis://…');
    await revokeLinkIn(this.store, id, caller, this.bounds, this.now());
  }
}

/** Who asks for a revocation: the namespaces they see, and whether they see them all (the admin team, the CLI). */
export interface RevokingCaller {
  sees(namespace: string): boolean;
  readonly all: boolean;
}

/** The CLI: it holds the store itself. */
export const EVERY_NAMESPACE: RevokingCaller = { sees: () => true, all: true };

export interface RevocationBounds {
  /** `--link-max-ttl`, in seconds. */
  readonly maxTtlSeconds: number;
  /** `--link-revocations-per-namespace`. */
  readonly perNamespace: number;
}

/** Clock skew allowed between the minting machine and a gateway (as link-tokens.ts allows). */
const SKEW_SECONDS = 60;

/**
 * Revokes a link by id in a store every gateway mirrors. The id names the link's namespace and expiry
 * (link-ids.ts): a caller who does not see that namespace gets `link_not_found`, exactly what a made-up
 * id of that namespace gets, and an id naming no namespace is only the admin team's (or the CLI's) to
 * revoke. The entry counts against the namespace's bound (`link_revocations_exceeded` past it) and
 * lasts until the link expires — for an id naming none, the longest a link may live.
 */
export async function revokeLinkIn(store: ApiKeyStore, id: string, caller: RevokingCaller, bounds: RevocationBounds, now = Date.now()): Promise<void> {
  if (!LINK_ID.test(id)) throw new SandgateError('invalid_request', 'a link id is 1-128 of [A-Za-z0-9_-]');
  const scope = linkIdScope(id);
  if (scope === undefined ? !caller.all : !caller.sees(scope.namespace)) throw new SandgateError('link_not_found');
  const nowS = Math.ceil(now / 1000);
  const longest = nowS + bounds.maxTtlSeconds + SKEW_SECONDS;
  const expiresAt = scope === undefined ? longest : Math.min(scope.exp + SKEW_SECONDS, longest);
  // A link past its expiry (and the skew) opens nothing: there is nothing to hold.
  if (expiresAt <= nowS) return;
  const namespace = scope?.namespace ?? '';
  if (!(await store.revokeLink({ id, namespace, expiresAt }, bounds.perNamespace))) {
    throw new SandgateError('link_revocations_exceeded', `namespace ${namespace === '' ? '(links naming none)' : namespace} holds its maximum of ${bounds.perNamespace} unexpired link revocations (--link-revocations-per-namespace): nothing was revoked`);
  }
}

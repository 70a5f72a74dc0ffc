import { SandgateError } from '../domain/errors.js';
import { LINK_PARAM, type LinkOrder } from '../domain/link.js';
import type { RouteOptions } from '../domain/route-key.js';
import { LINK_ID, type ApiKeyStore } from './api-keys.js';
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
    private readonly url: LinkUrlOptions,
    private readonly now: () => number = Date.now,
  ) {}

  async mint(o: LinkOrder): Promise<{ url: string; expiresAt: string; id: string }> {
    const ttlSeconds = o.ttlSeconds ?? Math.min(DEFAULT_TTL_SECONDS, this.maxTtlSeconds);
    const path = o.path ?? '/';
    const m = await mintLinkToken(this.keys(), { ...o, path, ttlSeconds }, this.maxTtlSeconds, this.now());
    return { url: linkUrl(this.url, o.namespace, o.name, o.port, path, m.token), expiresAt: new Date(m.exp * 1000).toISOString(), id: m.id };
  }

  /** Revokes a link by id on every gateway sharing the store. */
  async revoke(id: string): Promise<void> {
    if (this.store === undefined) throw new SandgateError('invalid_request', 'revoking links needs a shared store: set --api-keys FILE|redis://…');
    await revokeLinkIn(this.store, id, this.maxTtlSeconds, this.now());
  }
}

/**
 * Revokes a link by id in a store every gateway mirrors. Its expiry is not known from the id: the entry
 * is kept for the longest a link may live (plus clock skew), after which the link is dead anyway.
 */
export function revokeLinkIn(store: ApiKeyStore, id: string, maxTtlSeconds: number, now = Date.now()): Promise<void> {
  if (!LINK_ID.test(id)) throw new SandgateError('invalid_request', 'a link id is 1-128 of [A-Za-z0-9_-]');
  return store.revokeLink(id, Math.ceil(now / 1000) + maxTtlSeconds + 60);
}

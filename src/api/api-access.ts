import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import type { KeyPolicy, Principal } from '../domain/access.js';
import type { ErrorCode } from '../domain/errors.js';
import { sendError } from './respond.js';

/**
 * Who may see what on the operator surface (the sandbox API, its watch, the console): the same
 * principals as the front doors (docs/tenancy.md). Without an API key store every caller sees every
 * sandbox, as before keys existed. With one: an invalid key → 401 `api_key_invalid`; no key → 401
 * `api_key_required` when every namespace requires a key, else only the namespaces that do not, and a
 * route naming one that does → 401 `api_key_required`, as the doors answer it (before any lookup); a team
 * key → its own namespace only; the admin team → everything. A sandbox of another team is answered
 * exactly like a missing one, so its existence leaks nothing.
 */

export interface ApiAuth {
  /** The principal of a presented key (the same lookup the doors use). */
  principal(key: string | undefined): Principal;
  /** Lower-case header carrying the key (`--api-key-header`). */
  readonly header: string;
  /** Which namespaces require a key (`--api-key-namespaces`). */
  readonly policy: KeyPolicy;
}

/** What one caller may see: a namespace filter, or the denial it gets before anything is looked up. */
export type ApiScope =
  | {
      readonly ok: true;
      sees(namespace: string): boolean;
      /**
       * The denial a route naming this namespace gets before anything is looked up (no key where the
       * namespace requires one), as the doors answer it; undefined when the route goes on to the lookup.
       */
      refuses(namespace: string): ErrorCode | undefined;
      /** The caller's team: `*` for the admin team, empty without a key. */
      readonly team: string;
    }
  | { readonly ok: false; readonly code: ErrorCode };

const nothingRefused = (): undefined => undefined;
const EVERYTHING: ApiScope = { ok: true, sees: () => true, refuses: nothingRefused, team: '' };
const ADMIN_SCOPE: ApiScope = { ok: true, sees: () => true, refuses: nothingRefused, team: '*' };
const KEY_REQUIRED: ApiScope = { ok: false, code: 'api_key_required' };
const KEY_INVALID: ApiScope = { ok: false, code: 'api_key_invalid' };

/** The scope of the caller that sent `headers`; `auth` undefined means no key store (everything visible). */
export function apiScope(auth: ApiAuth | undefined, headers: IncomingHttpHeaders): ApiScope {
  if (auth === undefined) return EVERYTHING;
  const raw = headers[auth.header];
  // A repeated key header is ambiguous: refuse it rather than pick one.
  const p = Array.isArray(raw) ? auth.principal('') : auth.principal(raw);
  switch (p.kind) {
    case 'invalid':
      return KEY_INVALID;
    case 'admin':
      return ADMIN_SCOPE;
    case 'team': {
      const team = p.team;
      return { ok: true, sees: (ns) => ns === team, refuses: nothingRefused, team };
    }
    case 'anonymous': {
      const policy = auth.policy;
      if (policy.all) return KEY_REQUIRED;
      return { ok: true, sees: (ns) => !policy.namespaces.has(ns), refuses: (ns) => (policy.namespaces.has(ns) ? 'api_key_required' : undefined), team: '' };
    }
  }
}

/**
 * Resolves the caller's scope, or answers its denial on `res` and returns undefined. The one call every
 * operator route (the console's too) makes before reading the view.
 */
export function authorizeApi(auth: ApiAuth | undefined, headers: IncomingHttpHeaders, res: ServerResponse): ApiScope & { ok: true } | undefined {
  const scope = apiScope(auth, headers);
  if (scope.ok) return scope;
  sendError(res, scope.code);
  return undefined;
}

import { SandgateError } from './errors.js';

/**
 * Access policies: which kinds of credential may open a sandbox port (docs/identity.md).
 *
 * A policy is a list of rules; a request gets in when any rule lets it. Like the phase, a port's policy is
 * composed from two layers: the sandbox's own (`access:` per port, then its default) over its namespace's
 * default (`--access-policy-file`), over the built-in default `keys`. `public` is given per port only, and
 * is carried as the snapshot's `publicPorts` (the one notion of a port that needs no credential).
 */

/** One claim condition: the claim (a dotted path into the token's claims) must hold one of `values`. */
export interface ClaimCondition {
  readonly claim: string;
  readonly values: readonly string[];
}

export type AccessRule =
  | { readonly kind: 'public' }
  /** Today's credentials: API keys, traffic tokens and links. */
  | { readonly kind: 'keys' }
  /** A workload JWT from `issuer` (one of `--jwt-issuers-file`), with `audience` among its `aud`, and every condition met. */
  | { readonly kind: 'jwt'; readonly issuer: string; readonly audience: string | undefined; readonly claims: readonly ClaimCondition[] };

export type AccessPolicy = readonly AccessRule[];

/** A sandbox's own policy: per port, and a default for its other ports. */
export interface SandboxAccess {
  readonly default?: AccessPolicy | undefined;
  readonly ports?: Readonly<Record<number, AccessPolicy>> | undefined;
}

/** Namespace defaults (`--access-policy-file`): per namespace, and one for every other namespace. */
export interface NamespacePolicies {
  readonly default: AccessPolicy;
  readonly namespaces: ReadonlyMap<string, AccessPolicy>;
}

export const KEYS_ONLY: AccessPolicy = [{ kind: 'keys' }];
export const DEFAULT_POLICIES: NamespacePolicies = { default: KEYS_ONLY, namespaces: new Map() };

/** The policy of `port`: the sandbox's own for that port, else its default, else its namespace's. */
export function policyFor(own: SandboxAccess | undefined, namespace: string, port: number, ns: NamespacePolicies): AccessPolicy {
  return own?.ports?.[port] ?? own?.default ?? ns.namespaces.get(namespace) ?? ns.default;
}

export function allowsKeys(p: AccessPolicy): boolean {
  for (const r of p) if (r.kind === 'keys') return true;
  return false;
}

/** True when some rule of `p` names `issuer`: only there is a JWT from it a credential at all. */
export function namesIssuer(p: AccessPolicy, issuer: string): boolean {
  for (const r of p) if (r.kind === 'jwt' && r.issuer === issuer) return true;
  return false;
}

/** The ports a sandbox's own policy makes public, sorted (the snapshot's `publicPorts` adds them). */
export function publicPortsOf(a: SandboxAccess | undefined): number[] {
  if (a?.ports === undefined) return [];
  return Object.entries(a.ports)
    .filter(([, p]) => p.some((r) => r.kind === 'public'))
    .map(([port]) => Number(port))
    .sort((x, y) => x - y);
}

const MAX_RULES = 16;
const MAX_CONDITIONS = 16;
const MAX_VALUES = 64;
const MAX_STRING = 1024;
const CLAIM_PATH = /^[A-Za-z0-9_:/-]+(\.[A-Za-z0-9_:/-]+)*$/;

function fail(at: string, what: string): SandgateError {
  return new SandgateError('config_invalid', `${at}: ${what}`);
}

function shortString(v: unknown, at: string): string {
  if (typeof v !== 'string' || v === '' || v.length > MAX_STRING) throw fail(at, `must be a non-empty string of at most ${MAX_STRING} characters`);
  return v;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function parseConditions(raw: unknown, at: string): ClaimCondition[] {
  if (raw === undefined) return [];
  if (!isRecord(raw)) throw fail(at, 'must map claim names to a value or a list of values');
  const entries = Object.entries(raw);
  if (entries.length > MAX_CONDITIONS) throw fail(at, `holds more than ${MAX_CONDITIONS} conditions`);
  return entries.map(([claim, v]) => {
    if (!CLAIM_PATH.test(claim) || claim.length > MAX_STRING) throw fail(`${at}.${claim}`, 'is not a claim name (letters, digits, `_:/-`, dots between path segments)');
    const values = Array.isArray(v) ? v : [v];
    if (values.length === 0 || values.length > MAX_VALUES) throw fail(`${at}.${claim}`, `must hold 1 to ${MAX_VALUES} values`);
    return { claim, values: values.map((x, i) => shortString(x, `${at}.${claim}[${i}]`)) };
  });
}

const JWT_KEYS = new Set(['issuer', 'audience', 'claims']);

function parseRule(raw: unknown, at: string, publicAllowed: boolean): AccessRule {
  if (raw === 'keys') return { kind: 'keys' };
  if (raw === 'public') {
    if (!publicAllowed) throw fail(at, '`public` is given per sandbox port (a sandbox\'s `ports:` entry), never as a default');
    return { kind: 'public' };
  }
  if (isRecord(raw) && Object.keys(raw).length === 1 && isRecord(raw.jwt)) {
    const j = raw.jwt;
    for (const k of Object.keys(j)) if (!JWT_KEYS.has(k)) throw fail(`${at}.jwt`, `unknown key ${JSON.stringify(k)} (issuer, audience, claims)`);
    return {
      kind: 'jwt',
      issuer: shortString(j.issuer, `${at}.jwt.issuer`),
      audience: j.audience === undefined ? undefined : shortString(j.audience, `${at}.jwt.audience`),
      claims: parseConditions(j.claims, `${at}.jwt.claims`),
    };
  }
  throw fail(at, 'must be `public`, `keys` or `{jwt: {issuer, audience?, claims?}}`');
}

/** Parses a list of rules (a policy); `public` only where a single port is meant. Throws config_invalid. */
export function parsePolicy(raw: unknown, at: string, publicAllowed = false): AccessPolicy {
  const list = typeof raw === 'string' || isRecord(raw) ? [raw] : raw;
  if (!Array.isArray(list) || list.length === 0 || list.length > MAX_RULES) throw fail(at, `must be a rule or a list of 1 to ${MAX_RULES} rules`);
  return list.map((r, i) => parseRule(r, `${at}[${i}]`, publicAllowed));
}

/**
 * Parses a sandbox's `access`: a policy for all its ports, or `{default?: policy, ports?: {<port>: policy}}`.
 * Throws config_invalid.
 */
export function parseSandboxAccess(raw: unknown, at: string): SandboxAccess {
  if (!isRecord(raw) || ('jwt' in raw && Object.keys(raw).length === 1)) return { default: parsePolicy(raw, at) };
  for (const k of Object.keys(raw)) if (k !== 'default' && k !== 'ports') throw fail(at, `unknown key ${JSON.stringify(k)} (default, ports)`);
  const def = raw.default === undefined ? undefined : parsePolicy(raw.default, `${at}.default`);
  let ports: Record<number, AccessPolicy> | undefined;
  if (raw.ports !== undefined) {
    if (!isRecord(raw.ports)) throw fail(`${at}.ports`, 'must map port numbers to policies');
    ports = {};
    for (const [k, v] of Object.entries(raw.ports)) {
      const port = Number(k);
      if (!/^[0-9]{1,5}$/.test(k) || port < 1 || port > 65535) throw fail(`${at}.ports`, `${JSON.stringify(k)} is not a port number 1-65535`);
      ports[port] = parsePolicy(v, `${at}.ports.${k}`, true);
    }
  }
  return { default: def, ports };
}

/** Parses the namespace defaults: `{default?: policy, namespaces?: {<namespace>: policy}}`. Throws config_invalid. */
export function parseNamespacePolicies(raw: unknown, at: string): NamespacePolicies {
  if (!isRecord(raw)) throw fail(at, 'must be a map with `default` and/or `namespaces`');
  for (const k of Object.keys(raw)) if (k !== 'default' && k !== 'namespaces') throw fail(at, `unknown key ${JSON.stringify(k)} (default, namespaces)`);
  const namespaces = new Map<string, AccessPolicy>();
  if (raw.namespaces !== undefined) {
    if (!isRecord(raw.namespaces)) throw fail(`${at}.namespaces`, 'must map namespaces to policies');
    for (const [ns, p] of Object.entries(raw.namespaces)) namespaces.set(ns, parsePolicy(p, `${at}.namespaces.${ns}`));
  }
  return { default: raw.default === undefined ? KEYS_ONLY : parsePolicy(raw.default, `${at}.default`), namespaces };
}

/**
 * The value at a dotted path of a token's claims. A claim name may itself hold dots (Kubernetes puts the
 * namespace at `"kubernetes.io": {namespace}`), so at each level the longest name present is tried first:
 * `kubernetes.io.namespace` reads `claims["kubernetes.io"].namespace`.
 */
export function claimAt(claims: Readonly<Record<string, unknown>>, path: string): unknown {
  return valueAt(claims, path.split('.'));
}

function valueAt(v: unknown, segs: readonly string[]): unknown {
  if (segs.length === 0) return v;
  if (!isRecord(v)) return undefined;
  for (let k = segs.length; k >= 1; k--) {
    const name = segs.slice(0, k).join('.');
    if (!Object.prototype.hasOwnProperty.call(v, name)) continue;
    const found = valueAt(v[name], segs.slice(k));
    if (found !== undefined) return found;
  }
  return undefined;
}

/** True when every condition holds: the claim is one of the values, or (a list claim) holds one of them. */
export function claimsMatch(conditions: readonly ClaimCondition[], claims: Readonly<Record<string, unknown>>): boolean {
  for (const c of conditions) {
    const v = claimAt(claims, c.claim);
    const ok = Array.isArray(v) ? v.some((x) => typeof x === 'string' && c.values.includes(x)) : typeof v === 'string' && c.values.includes(v);
    if (!ok) return false;
  }
  return true;
}

/**
 * A snapshot's `publicPorts` with the ports its own policy makes public added (sorted, each once);
 * undefined when there are none. Drivers call this, so `public` is carried the one way.
 */
export function withPolicyPublicPorts(publicPorts: readonly number[] | undefined, a: SandboxAccess | undefined): number[] | undefined {
  const all = new Set([...(publicPorts ?? []), ...publicPortsOf(a)]);
  return all.size === 0 ? undefined : [...all].sort((x, y) => x - y);
}

function ruleToGrammar(r: AccessRule): unknown {
  if (r.kind !== 'jwt') return r.kind;
  const claims = r.claims.length === 0 ? undefined : Object.fromEntries(r.claims.map((c) => [c.claim, [...c.values]]));
  return { jwt: { issuer: r.issuer, ...(r.audience === undefined ? {} : { audience: r.audience }), ...(claims === undefined ? {} : { claims }) } };
}

/** A sandbox's policy in the grammar parseSandboxAccess reads (for the remote driver's wire). */
export function sandboxAccessToGrammar(a: SandboxAccess): unknown {
  const out: { default?: unknown; ports?: Record<string, unknown> } = {};
  if (a.default !== undefined) out.default = a.default.map(ruleToGrammar);
  if (a.ports !== undefined) out.ports = Object.fromEntries(Object.entries(a.ports).map(([port, p]) => [port, p.map(ruleToGrammar)]));
  return out;
}

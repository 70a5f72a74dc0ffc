import { isIP } from 'node:net';
import { isDnsLabel, parsePort } from '../../domain/labels.js';
import { parseDuration } from '../../domain/duration.js';
import { sandboxKey, type BackendSnapshot, type BackendState, type Condition, type ConditionStatus, type Endpoint, type SessionModel } from '../../domain/sandbox.js';
import { parseSandboxAccess, publicPortsOf, withPolicyPublicPorts, type SandboxAccess } from '../../domain/access-policy.js';
import { parse as parseYaml } from 'yaml';

/**
 * Reading the parts of a Sandbox custom resource that both kinds share: identity from metadata, the
 * sandgate.dev/* annotations, conditions, endpoints and times. Objects arrive as parsed JSON from the API
 * server, so every field is checked before use and nothing of the raw object is kept: the snapshot holds
 * only what routing and compose() need, with short strings shared where the values repeat.
 */

/** Options of the pure mapping functions. */
export interface MapOptions {
  /** Session model when the object has no `sandgate.dev/supervisor` annotation. */
  readonly defaultSessionModel: SessionModel;
  /** Told about annotations that were ignored or trimmed (the object is still mapped). */
  readonly onWarning?: ((message: string) => void) | undefined;
}

export const ANNOTATION_SUPERVISOR = 'sandgate.dev/supervisor';
export const ANNOTATION_PORTS = 'sandgate.dev/ports';
/** `50051=h2c,9000=http`: the protocol each listed port speaks (http, the default, or h2c). */
export const ANNOTATION_PORT_PROTOCOLS = 'sandgate.dev/port-protocols';
/** `3000,8080`: ports anyone may open, no credential needed. */
export const ANNOTATION_PUBLIC_PORTS = 'sandgate.dev/public-ports';
export const ANNOTATION_ACCESS = 'sandgate.dev/access';
export const ANNOTATION_ID = 'sandgate.dev/id';
/** OpenKruise's per-sandbox traffic token (E2B `envd` access token). */
export const ANNOTATION_RUNTIME_TOKEN = 'agents.kruise.io/runtime-access-token';
/** `derived`: require HMAC(secret, sandbox id) as the traffic token. */
export const ANNOTATION_ACCESS_TOKEN = 'sandgate.dev/access-token';
/** `true` / `false`: resume on traffic while paused (overrides the gateway's --auto-resume). */
export const ANNOTATION_RESUME = 'sandgate.dev/resume-on-traffic';
/** A duration (`30m`; `0` = never): pause after this long without traffic (overrides --idle-timeout). */
export const ANNOTATION_IDLE_TIMEOUT = 'sandgate.dev/idle-timeout';
/** A duration: how long a request that wakes the sandbox waits for it (overrides --readiness-wait-ms for a wake). */
export const ANNOTATION_WAKE_TIMEOUT = 'sandgate.dev/wake-timeout';
/** Written by the gateway (RFC 3339): the sandbox's last traffic activity. */
export const ANNOTATION_LAST_ACTIVITY = 'sandgate.dev/last-activity';

/** Condition messages longer than this are cut: they are for operators, and memory is per sandbox. */
export const MAX_MESSAGE_LENGTH = 256;

export type Json = Readonly<Record<string, unknown>>;

export function asObject(v: unknown): Json | undefined {
  return typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Json) : undefined;
}

export function nonEmptyString(v: unknown): string | undefined {
  return typeof v === 'string' && v !== '' ? v : undefined;
}

/**
 * A small bounded table of shared strings: namespaces, condition types, reasons and common messages
 * repeat across thousands of sandboxes, and JSON.parse gives every occurrence its own copy.
 */
const SHARED = new Map<string, string>();
const MAX_SHARED = 4096;
const MAX_SHARED_LENGTH = 96;

export function share(s: string): string {
  if (s.length > MAX_SHARED_LENGTH) return s;
  const held = SHARED.get(s);
  if (held !== undefined) return held;
  if (SHARED.size < MAX_SHARED) SHARED.set(s, s);
  return s;
}

export interface Identity {
  readonly namespace: string;
  readonly name: string;
  readonly uid: string;
  readonly resourceVersion: string;
  readonly generation: number;
  /** metadata.creationTimestamp (epoch ms): set by the API server, not by the tenant; decides who keeps a contested id. */
  readonly createdAt: number | undefined;
  readonly deleting: boolean;
  readonly labels: Json | undefined;
  readonly annotations: Json | undefined;
}

/** metadata of an object; undefined when name, namespace or uid is missing (such an object is refused). */
export function readIdentity(obj: unknown): Identity | undefined {
  const meta = asObject(asObject(obj)?.metadata);
  if (meta === undefined) return undefined;
  const namespace = nonEmptyString(meta.namespace);
  const name = nonEmptyString(meta.name);
  const uid = nonEmptyString(meta.uid);
  if (namespace === undefined || name === undefined || uid === undefined) return undefined;
  return {
    namespace: share(namespace),
    name,
    uid,
    resourceVersion: typeof meta.resourceVersion === 'string' ? meta.resourceVersion : '',
    generation: typeof meta.generation === 'number' ? meta.generation : 0,
    createdAt: readTime(meta.creationTimestamp),
    deleting: nonEmptyString(meta.deletionTimestamp) !== undefined,
    labels: asObject(meta.labels),
    annotations: asObject(meta.annotations),
  };
}

function conditionStatus(v: unknown): ConditionStatus {
  return v === 'True' ? 'True' : v === 'False' ? 'False' : 'Unknown';
}

/** A condition or status message, cut to MAX_MESSAGE_LENGTH. */
export function readMessage(v: unknown): string {
  if (typeof v !== 'string') return '';
  return share(v.length > MAX_MESSAGE_LENGTH ? v.slice(0, MAX_MESSAGE_LENGTH - 1) + '…' : v);
}

/** status.conditions of the types in `keep` (metav1.Condition shape), in the object's order. */
export function readConditions(status: Json | undefined, keep: ReadonlySet<string>): Condition[] {
  const raw = status?.conditions;
  if (!Array.isArray(raw)) return [];
  const out: Condition[] = [];
  for (const item of raw) {
    const c = asObject(item);
    const type = c === undefined ? undefined : nonEmptyString(c.type);
    if (c === undefined || type === undefined || !keep.has(type)) continue;
    const ltt = nonEmptyString(c.lastTransitionTime);
    out.push({
      type: share(type),
      status: conditionStatus(c.status),
      reason: typeof c.reason === 'string' ? share(c.reason) : '',
      message: readMessage(c.message),
      ...(ltt === undefined ? {} : { lastTransitionTime: ltt }),
    });
  }
  return out;
}

export function findCondition(conditions: readonly Condition[], type: string): Condition | undefined {
  for (const c of conditions) if (c.type === type) return c;
  return undefined;
}

/** The Ready condition compose() reads as "no status yet" (phase Unknown). */
export const READY_UNKNOWN: Condition = Object.freeze({
  type: 'Ready',
  status: 'Unknown',
  reason: 'NoStatus',
  message: 'The controller has not reported a Ready condition yet',
});

/** Not routable yet: no address known. One shared object. */
export const NO_ENDPOINT: Endpoint = Object.freeze({ kind: 'address', addresses: Object.freeze([]) as readonly string[] });

/** No extra ids. One shared array. */
export const NO_IDS: readonly string[] = Object.freeze([]);

/** An address endpoint of the valid IPs among `ips` (IPv4 and IPv6), or undefined when there is none. */
export function addressEndpoint(ips: readonly unknown[]): Endpoint | undefined {
  const addresses: string[] = [];
  for (const ip of ips) if (typeof ip === 'string' && isIP(ip) !== 0 && !addresses.includes(ip)) addresses.push(ip);
  return addresses.length === 0 ? undefined : { kind: 'address', addresses };
}

/** An RFC 3339 time as epoch milliseconds; undefined when absent or unparsable. */
export function readTime(v: unknown): number | undefined {
  if (typeof v !== 'string' || v === '') return undefined;
  const t = Date.parse(v);
  return Number.isNaN(t) ? undefined : t;
}

export interface Annotated {
  readonly sessionModel: SessionModel;
  readonly ports: readonly number[] | undefined;
  readonly h2cPorts: readonly number[] | undefined;
  readonly tcpPorts: readonly number[] | undefined;
  readonly publicPorts: readonly number[] | undefined;
  readonly access: SandboxAccess | undefined;
  readonly id: string | undefined;
  readonly accessToken: string | { readonly derived: true } | undefined;
  /** OpenKruise's runtime (envd) token: the in-sandbox daemon's own credential, not the gateway's. */
  readonly envdAccessToken: string | undefined;
  readonly resumeOnTraffic: boolean | undefined;
  readonly idleTimeoutMs: number | undefined;
  readonly wakeTimeoutMs: number | undefined;
}

/** A duration annotation's value in ms; undefined (and a warning) when absent or not a duration. */
function durationAnnotation(a: Json | undefined, name: string, where: string, opts: MapOptions): number | undefined {
  const v = a?.[name];
  if (v === undefined) return undefined;
  const ms = typeof v === 'string' ? parseDuration(v) : 'not a string';
  if (typeof ms === 'number') return ms;
  opts.onWarning?.(`${where}: annotation ${name}=${JSON.stringify(v)} is not a duration (${ms}); ignored`);
  return undefined;
}

/** The h2c and tcp ports of a sandgate.dev/port-protocols annotation; none (and a warning) when any entry is bad. */
function portProtocols(a: Json | undefined, where: string, opts: MapOptions): { h2c: number[] | undefined; tcp: number[] | undefined } {
  const none = { h2c: undefined, tcp: undefined };
  const v = a?.[ANNOTATION_PORT_PROTOCOLS];
  if (v === undefined) return none;
  const h2c: number[] = [];
  const tcp: number[] = [];
  for (const part of String(v).split(',')) {
    const [portText, protocol, extra] = part.trim().split('=');
    const p = parsePort((portText ?? '').trim());
    const proto = protocol?.trim();
    const other = proto === 'h2c' ? tcp : proto === 'tcp' ? h2c : [...h2c, ...tcp];
    if (p === 0 || extra !== undefined || (proto !== 'h2c' && proto !== 'http' && proto !== 'tcp') || other.includes(p)) {
      opts.onWarning?.(`${where}: annotation ${ANNOTATION_PORT_PROTOCOLS}=${JSON.stringify(v)} is not a list of <port>=http|h2c|tcp, one protocol a port; ignored`);
      return none;
    }
    if (proto === 'h2c' && !h2c.includes(p)) h2c.push(p);
    if (proto === 'tcp' && !tcp.includes(p)) tcp.push(p);
  }
  return { h2c: h2c.length === 0 ? undefined : h2c, tcp: tcp.length === 0 ? undefined : tcp };
}

/**
 * The ports of a sandgate.dev/public-ports annotation; undefined (and a warning) when any entry is bad or
 * not among `ports`: a port is made public by a value read whole, never by the valid part of a bad one.
 */
function publicPortsAnnotation(a: Json | undefined, ports: readonly number[] | undefined, where: string, opts: MapOptions): number[] | undefined {
  const v = a?.[ANNOTATION_PUBLIC_PORTS];
  if (v === undefined) return undefined;
  const out: number[] = [];
  for (const part of String(v).split(',')) {
    const p = parsePort(part.trim());
    if (p === 0 || (ports !== undefined && !ports.includes(p))) {
      opts.onWarning?.(`${where}: annotation ${ANNOTATION_PUBLIC_PORTS}=${JSON.stringify(v)} is not a list of allowed ports; ignored (no port is public)`);
      return undefined;
    }
    if (!out.includes(p)) out.push(p);
  }
  return out;
}

/** Admits no credential: what a bad sandgate.dev/access annotation stands for (fail closed). */
const ADMITS_NONE: SandboxAccess = { default: [] };

/**
 * The sandbox's own access policy from sandgate.dev/access (JSON or YAML, docs/identity.md). A bad value
 * is reported and admits no credential on any port (public ports stay public): a policy is read whole,
 * and a mistake never falls back to a wider one.
 */
function accessAnnotation(a: Json | undefined, ports: readonly number[] | undefined, where: string, opts: MapOptions): SandboxAccess | undefined {
  const v = a?.[ANNOTATION_ACCESS];
  if (v === undefined) return undefined;
  try {
    const access = parseSandboxAccess(parseYaml(String(v)), `annotation ${ANNOTATION_ACCESS}`);
    const outside = ports === undefined ? undefined : publicPortsOf(access).find((p) => !ports.includes(p));
    if (outside !== undefined) throw new Error(`public port ${outside} is not among the sandbox's ports`);
    return access;
  } catch (err) {
    opts.onWarning?.(`${where}: annotation ${ANNOTATION_ACCESS} is not a valid access policy (${(err as Error).message}); no credential is admitted`);
    return ADMITS_NONE;
  }
}

/**
 * The sandgate.dev/* annotations. A bad value is reported through `onWarning` and then: supervisor →
 * the default; id → ignored; ports → the valid entries only (fail closed: a list with no valid port
 * allows no port, rather than every port); port-protocols → ignored (every port speaks HTTP/1.1, none is TCP);
 * public-ports → ignored (no port is public); access → admits no credential.
 */
export function readAnnotations(id: Identity, opts: MapOptions): Annotated {
  const a = id.annotations;
  const where = sandboxKey(id.namespace, id.name);
  let sessionModel = opts.defaultSessionModel;
  const sup = a?.[ANNOTATION_SUPERVISOR];
  if (sup !== undefined) {
    if (sup === 'none' || sup === 'required') sessionModel = sup;
    else opts.onWarning?.(`${where}: annotation ${ANNOTATION_SUPERVISOR}=${JSON.stringify(sup)} is not "none" or "required"; using ${sessionModel}`);
  }
  let ports: number[] | undefined;
  const portText = a?.[ANNOTATION_PORTS];
  if (portText !== undefined) {
    ports = [];
    const bad: string[] = [];
    for (const part of String(portText).split(',')) {
      const p = parsePort(part.trim());
      if (p === 0) bad.push(part.trim());
      else if (!ports.includes(p)) ports.push(p);
    }
    if (bad.length > 0) opts.onWarning?.(`${where}: annotation ${ANNOTATION_PORTS} has invalid ports ${JSON.stringify(bad)}; allowing only ${JSON.stringify(ports)}`);
  }
  let extraId: string | undefined;
  const idText = a?.[ANNOTATION_ID];
  if (idText !== undefined) {
    if (typeof idText === 'string' && isDnsLabel(idText)) extraId = idText;
    else opts.onWarning?.(`${where}: annotation ${ANNOTATION_ID}=${JSON.stringify(idText)} is not a DNS-1123 label; ignored`);
  }
  let accessToken: Annotated['accessToken'];
  const runtimeToken = a?.[ANNOTATION_RUNTIME_TOKEN];
  const envdAccessToken = typeof runtimeToken === 'string' && runtimeToken !== '' ? runtimeToken : undefined;
  const tokenMode = a?.[ANNOTATION_ACCESS_TOKEN];
  if (tokenMode !== undefined) {
    if (tokenMode === 'derived') accessToken = { derived: true };
    else opts.onWarning?.(`${where}: annotation ${ANNOTATION_ACCESS_TOKEN}=${JSON.stringify(tokenMode)} is not "derived"; ignored`);
  }
  let resumeOnTraffic: boolean | undefined;
  const resume = a?.[ANNOTATION_RESUME];
  if (resume !== undefined) {
    if (resume === 'true' || resume === 'false') resumeOnTraffic = resume === 'true';
    else opts.onWarning?.(`${where}: annotation ${ANNOTATION_RESUME}=${JSON.stringify(resume)} is not "true" or "false"; ignored`);
  }
  const idleTimeoutMs = durationAnnotation(a, ANNOTATION_IDLE_TIMEOUT, where, opts);
  const wakeTimeoutMs = durationAnnotation(a, ANNOTATION_WAKE_TIMEOUT, where, opts);
  const { h2c: h2cPorts, tcp: tcpPorts } = portProtocols(a, where, opts);
  const access = accessAnnotation(a, ports, where, opts);
  const publicPorts = withPolicyPublicPorts(publicPortsAnnotation(a, ports, where, opts), access);
  return { sessionModel, ports, h2cPorts, tcpPorts, publicPorts, access, id: extraId, accessToken, envdAccessToken, resumeOnTraffic, idleTimeoutMs, wakeTimeoutMs };
}

/** What a CRD's mapping decides; the identity and the annotations give the rest of the snapshot. */
export interface Mapped {
  readonly instanceId: string;
  readonly ids: readonly string[];
  readonly state: BackendState;
  readonly conditions: Condition[];
  readonly endpoint: Endpoint;
  readonly shutdownTime: number | undefined;
  readonly revision?: BackendSnapshot['revision'];
}

/** The one snapshot shape both CRD mappings return (one hidden class for the view to hold). */
export function snapshotOf(id: Identity, ann: Annotated, m: Mapped): BackendSnapshot {
  return {
    namespace: id.namespace,
    name: id.name,
    uid: id.uid,
    resourceVersion: id.resourceVersion,
    createdAt: id.createdAt,
    instanceId: m.instanceId,
    ids: m.ids,
    state: m.state,
    conditions: m.conditions,
    endpoint: m.endpoint,
    sessionModel: ann.sessionModel,
    ports: ann.ports,
    h2cPorts: ann.h2cPorts,
    tcpPorts: ann.tcpPorts,
    publicPorts: ann.publicPorts,
    access: ann.access,
    accessToken: ann.accessToken,
    envdAccessToken: ann.envdAccessToken,
    resumeOnTraffic: ann.resumeOnTraffic,
    idleTimeoutMs: ann.idleTimeoutMs,
    wakeTimeoutMs: ann.wakeTimeoutMs,
    shutdownTime: m.shutdownTime,
    revision: m.revision,
  };
}

import { isIP } from 'node:net';
import { isDnsLabel, isDnsName } from '../../domain/labels.js';
import { isoTime } from '../../lib/iso-time.js';
import { MAX_DURATION_MS } from '../../domain/duration.js';
import type { BackendSnapshot, BackendState, Condition, ConditionStatus, DriverEvent, Endpoint } from '../../domain/sandbox.js';
import { DriverError } from './driver-error.js';
import { parseSandboxAccess, publicPortsOf, sandboxAccessToGrammar, withPolicyPublicPorts, type SandboxAccess } from '../../domain/access-policy.js';
import type { WireBackendState, WireCondition, WireConditionStatus, WireDeleted, WireSandbox, WireTimestamp } from './driver-proto.js';

/**
 * The conversion between driver.proto messages and BackendSnapshot, both ways. Decoding checks every
 * field and throws DriverError `driver_message_invalid` naming the first bad one, so a driver that sends
 * garbage gets it reported and dropped instead of reaching the view. The limits keep one hostile driver
 * from growing the gateway's memory without bound.
 */

/** Limits on what one snapshot may carry (Kubernetes' own limits where it has one). */
export const LIMITS = {
  /** metav1.Condition.message is at most 32768 bytes. */
  messageLength: 32_768,
  /** Condition type and reason (metav1.Condition: type ≤ 316, reason ≤ 1024). */
  wordLength: 1024,
  /** uid, resource_version, instance_id, revisions. */
  idLength: 256,
  conditions: 64,
  ids: 32,
  addresses: 16,
  ports: 1024,
  /** The access policy's JSON. */
  accessLength: 65_536,
} as const;

const STATE_FROM_WIRE: Readonly<Record<string, BackendState>> = {
  BACKEND_STATE_STARTING: 'starting',
  BACKEND_STATE_READY: 'ready',
  BACKEND_STATE_PAUSED: 'paused',
  BACKEND_STATE_DELETING: 'deleting',
  BACKEND_STATE_FAILED: 'failed',
};

const STATE_TO_WIRE: Readonly<Record<BackendState, WireBackendState>> = {
  starting: 'BACKEND_STATE_STARTING',
  ready: 'BACKEND_STATE_READY',
  paused: 'BACKEND_STATE_PAUSED',
  deleting: 'BACKEND_STATE_DELETING',
  failed: 'BACKEND_STATE_FAILED',
};

const STATUS_FROM_WIRE: Readonly<Record<string, ConditionStatus>> = {
  CONDITION_STATUS_TRUE: 'True',
  CONDITION_STATUS_FALSE: 'False',
  CONDITION_STATUS_UNKNOWN: 'Unknown',
};

const STATUS_TO_WIRE: Readonly<Record<ConditionStatus, WireConditionStatus>> = {
  True: 'CONDITION_STATUS_TRUE',
  False: 'CONDITION_STATUS_FALSE',
  Unknown: 'CONDITION_STATUS_UNKNOWN',
};

/** The largest |epoch ms| a JavaScript Date holds (ECMA-262 §21.4.1.1). */
const MAX_DATE_MS = 8.64e15;

function bad(field: string, why: string): DriverError {
  return new DriverError('driver_message_invalid', `${field} ${why}`, { field });
}

function record(v: unknown, field: string): Record<string, unknown> {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw bad(field, 'is missing');
  return v as Record<string, unknown>;
}

/** `condition`: the index of the condition `o` is, when it is one (its field path is built only for an error). */
function text(o: Record<string, unknown>, key: string, at: string, max: number, required: boolean, condition?: number): string {
  const v = o[key] ?? '';
  if (typeof v === 'string' && v.length <= max && (v !== '' || !required)) return v;
  const field = (condition === undefined ? at : conditionAt(at, condition) + '.') + key;
  if (typeof v !== 'string') throw bad(field, 'must be a string');
  if (v === '') throw bad(field, 'is required');
  throw bad(field, `is longer than ${max} characters`);
}

function label(o: Record<string, unknown>, key: string, at: string): string {
  const v = text(o, key, at, 63, true);
  if (!isDnsLabel(v)) throw bad(at + key, `${JSON.stringify(v)} must be a DNS-1123 label`);
  return v;
}

function list(o: Record<string, unknown>, key: string, at: string, max: number): readonly unknown[] {
  const v = o[key] ?? [];
  if (!Array.isArray(v)) throw bad(at + key, 'must be a list');
  if (v.length > max) throw bad(at + key, `has more than ${max} entries`);
  return v;
}

/** The index of the first entry whose key an earlier entry has too, or -1. */
function repeated<T>(items: readonly T[], key: (item: T) => string): number {
  if (items.length < 2) return -1;
  if (items.length === 2) return key(items[0]!) === key(items[1]!) ? 1 : -1;
  const seen = new Set<string>();
  for (let i = 0; i < items.length; i++) {
    const k = key(items[i]!);
    if (seen.has(k)) return i;
    seen.add(k);
  }
  return -1;
}

/** google.protobuf.Timestamp → epoch milliseconds. */
function timestampMs(v: unknown, field: string): number {
  const t = record(v, field);
  const rawSeconds = t.seconds ?? 0;
  const seconds = typeof rawSeconds === 'string' && /^-?\d{1,16}$/.test(rawSeconds) ? Number(rawSeconds) : rawSeconds;
  const nanos = t.nanos ?? 0;
  if (typeof seconds !== 'number' || !Number.isSafeInteger(seconds)) throw bad(field + '.seconds', 'must be an integer');
  if (typeof nanos !== 'number' || !Number.isInteger(nanos) || nanos < 0 || nanos > 999_999_999) throw bad(field + '.nanos', 'must be 0-999999999');
  const ms = seconds * 1000 + Math.floor(nanos / 1e6);
  if (Math.abs(ms) > MAX_DATE_MS) throw bad(field, 'is out of range');
  return ms;
}

/** google.protobuf.Duration → milliseconds: not negative, at most a year (domain/duration.ts). */
function durationMs(v: unknown, field: string): number {
  const ms = timestampMs(v, field);
  if (ms < 0 || ms > MAX_DURATION_MS) throw bad(field, 'must be between 0 and a year');
  return ms;
}

export function msToTimestamp(ms: number): WireTimestamp {
  const whole = Math.floor(ms);
  const seconds = Math.floor(whole / 1000);
  return { seconds: String(seconds), nanos: (whole - seconds * 1000) * 1e6 };
}

/** `conditions[i]` of `at`: built only for an error, never for a valid update. */
function conditionAt(at: string, i: number): string {
  return `${at}conditions[${i}]`;
}

function conditionFromWire(v: unknown, at: string, i: number): Condition {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw bad(conditionAt(at, i), 'is missing');
  const c = v as Record<string, unknown>;
  const type = text(c, 'type', at, LIMITS.wordLength, true, i);
  const status = STATUS_FROM_WIRE[String(c.status ?? '')];
  if (status === undefined) throw bad(conditionAt(at, i) + '.status', 'must be TRUE, FALSE or UNKNOWN');
  const lt = c.last_transition_time;
  return {
    type,
    status,
    reason: text(c, 'reason', at, LIMITS.wordLength, false, i),
    message: text(c, 'message', at, LIMITS.messageLength, false, i),
    lastTransitionTime: lt === undefined || lt === null ? undefined : isoTime(timestampMs(lt, conditionAt(at, i) + '.last_transition_time')),
  };
}

function endpointFromWire(o: Record<string, unknown>, at: string): Endpoint {
  const kind = o.endpoint ?? (o.addresses != null ? 'addresses' : o.service_fqdn !== undefined ? 'service_fqdn' : o.relay_only != null ? 'relay_only' : undefined);
  switch (kind) {
    case undefined:
      return { kind: 'address', addresses: [] };
    case 'addresses': {
      const addrs = list(record(o.addresses, at + 'addresses'), 'addresses', at + 'addresses.', LIMITS.addresses);
      for (let i = 0; i < addrs.length; i++) {
        const a = addrs[i];
        if (typeof a !== 'string' || isIP(a) === 0) throw bad(`${at}addresses.addresses[${i}]`, `${JSON.stringify(a)} must be an IP address`);
      }
      return { kind: 'address', addresses: addrs as string[] };
    }
    case 'service_fqdn': {
      const fqdn = text(o, 'service_fqdn', at, 253, true);
      if (!isDnsName(fqdn)) throw bad(at + 'service_fqdn', `${JSON.stringify(fqdn)} must be a lower-case DNS name`);
      return { kind: 'service', fqdn };
    }
    case 'relay_only':
      return { kind: 'relay' };
    default:
      throw bad(at + 'endpoint', `has an unknown kind ${JSON.stringify(kind)}`);
  }
}

/**
 * driver.proto `Sandbox` → BackendSnapshot. Throws DriverError `driver_message_invalid` (with `field`) for
 * the first field that breaks the contract. `at` prefixes field names in the error (`upserted.`).
 */
export function snapshotFromWire(msg: unknown, at = ''): BackendSnapshot {
  const o = record(msg, at === '' ? 'sandbox' : at.slice(0, -1));
  const namespace = label(o, 'namespace', at);
  const name = label(o, 'name', at);
  const state = STATE_FROM_WIRE[String(o.state ?? '')];
  if (state === undefined) throw bad(at + 'state', 'must be STARTING, READY, PAUSED, DELETING or FAILED');

  // Plain loops, and a duplicate check that allocates nothing for the usual one or two entries: a busy
  // driver's every update passes through here.
  const ids = list(o, 'ids', at, LIMITS.ids);
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i];
    if (typeof id !== 'string' || !isDnsLabel(id)) throw bad(`${at}ids[${i}]`, `${JSON.stringify(id)} must be a DNS-1123 label`);
  }
  const twiceId = repeated(ids as string[], (id) => id);
  if (twiceId >= 0) throw bad(`${at}ids[${twiceId}]`, `${JSON.stringify(ids[twiceId])} is listed twice`);

  const wireConditions = list(o, 'conditions', at, LIMITS.conditions);
  // map() sizes the array once; push() onto [] would make room for 17.
  const conditions = wireConditions.map((c, i) => conditionFromWire(c, at, i));
  const twiceType = repeated(conditions, (c) => c.type);
  if (twiceType >= 0) throw bad(`${conditionAt(at, twiceType)}.type`, `${JSON.stringify(conditions[twiceType]!.type)} is listed twice`);

  const ports = list(o, 'ports', at, LIMITS.ports);
  for (let i = 0; i < ports.length; i++) {
    const p = ports[i];
    if (typeof p !== 'number' || !Number.isInteger(p) || p < 1 || p > 65535) throw bad(`${at}ports[${i}]`, 'must be a port number 1-65535');
  }

  const h2cPorts = list(o, 'h2c_ports', at, LIMITS.ports);
  for (let i = 0; i < h2cPorts.length; i++) {
    const p = h2cPorts[i];
    if (typeof p !== 'number' || !Number.isInteger(p) || p < 1 || p > 65535) throw bad(`${at}h2c_ports[${i}]`, 'must be a port number 1-65535');
    if (ports.length > 0 && !ports.includes(p)) throw bad(`${at}h2c_ports[${i}]`, `port ${p} is not in ports`);
  }

  const tcpPorts = list(o, 'tcp_ports', at, LIMITS.ports);
  for (let i = 0; i < tcpPorts.length; i++) {
    const p = tcpPorts[i];
    if (typeof p !== 'number' || !Number.isInteger(p) || p < 1 || p > 65535) throw bad(`${at}tcp_ports[${i}]`, 'must be a port number 1-65535');
    if (ports.length > 0 && !ports.includes(p)) throw bad(`${at}tcp_ports[${i}]`, `port ${p} is not in ports`);
    if (h2cPorts.includes(p)) throw bad(`${at}tcp_ports[${i}]`, `port ${p} is also in h2c_ports`);
  }

  const publicPorts = list(o, 'public_ports', at, LIMITS.ports);
  for (let i = 0; i < publicPorts.length; i++) {
    const p = publicPorts[i];
    if (typeof p !== 'number' || !Number.isInteger(p) || p < 1 || p > 65535) throw bad(`${at}public_ports[${i}]`, 'must be a port number 1-65535');
    if (ports.length > 0 && !ports.includes(p)) throw bad(`${at}public_ports[${i}]`, `port ${p} is not in ports`);
  }

  let access: SandboxAccess | undefined;
  const accessText = text(o, 'access', at, LIMITS.accessLength, false);
  if (accessText !== '') {
    try {
      access = parseSandboxAccess(JSON.parse(accessText), 'access');
    } catch (err) {
      throw bad(at + 'access', err instanceof SyntaxError ? `is not JSON: ${err.message}` : (err as Error).message);
    }
    const outside = ports.length === 0 ? undefined : publicPortsOf(access).find((p) => !ports.includes(p));
    if (outside !== undefined) throw bad(at + 'access', `public port ${outside} is not in ports`);
  }

  const sessionModel = o.session_model ?? 'SESSION_MODEL_REQUIRED';
  if (sessionModel !== 'SESSION_MODEL_REQUIRED' && sessionModel !== 'SESSION_MODEL_NONE') throw bad(at + 'session_model', 'must be REQUIRED or NONE');

  let revision: BackendSnapshot['revision'];
  if (o.revision !== undefined && o.revision !== null) {
    const r = record(o.revision, at + 'revision');
    revision = { desired: text(r, 'desired', at + 'revision.', LIMITS.idLength, true), current: text(r, 'current', at + 'revision.', LIMITS.idLength, true) };
  }

  return {
    namespace,
    name,
    uid: text(o, 'uid', at, LIMITS.idLength, true),
    resourceVersion: text(o, 'resource_version', at, LIMITS.idLength, true),
    instanceId: text(o, 'instance_id', at, LIMITS.idLength, false),
    ids: ids as string[],
    state,
    conditions,
    endpoint: endpointFromWire(o, at),
    sessionModel: sessionModel === 'SESSION_MODEL_NONE' ? 'none' : 'required',
    ports: ports.length === 0 ? undefined : (ports as number[]),
    h2cPorts: h2cPorts.length === 0 ? undefined : (h2cPorts as number[]),
    tcpPorts: tcpPorts.length === 0 ? undefined : (tcpPorts as number[]),
    publicPorts: withPolicyPublicPorts(publicPorts.length === 0 ? undefined : (publicPorts as number[]), access),
    access,
    shutdownTime: o.shutdown_time === undefined || o.shutdown_time === null ? undefined : timestampMs(o.shutdown_time, at + 'shutdown_time'),
    revision,
    createdAt: o.created_at === undefined || o.created_at === null ? undefined : timestampMs(o.created_at, at + 'created_at'),
    envdAccessToken: text(o, 'envd_access_token', at, LIMITS.idLength, false) || undefined,
    idleTimeoutMs: o.idle_timeout === undefined || o.idle_timeout === null ? undefined : durationMs(o.idle_timeout, at + 'idle_timeout'),
    wakeTimeoutMs: o.wake_timeout === undefined || o.wake_timeout === null ? undefined : durationMs(o.wake_timeout, at + 'wake_timeout'),
  };
}

/** driver.proto `Deleted` → a delete DriverEvent. Throws like snapshotFromWire. */
export function deletionFromWire(msg: unknown, at = ''): Extract<DriverEvent, { type: 'delete' }> {
  const o = record(msg, at === '' ? 'deleted' : at.slice(0, -1));
  return {
    type: 'delete',
    namespace: label(o, 'namespace', at),
    name: label(o, 'name', at),
    uid: text(o, 'uid', at, LIMITS.idLength, true),
    resourceVersion: text(o, 'resource_version', at, LIMITS.idLength, false),
  };
}

function conditionToWire(c: Condition): WireCondition {
  const lt = c.lastTransitionTime === undefined ? NaN : Date.parse(c.lastTransitionTime);
  return {
    type: c.type,
    status: STATUS_TO_WIRE[c.status],
    reason: c.reason,
    message: c.message,
    last_transition_time: Number.isNaN(lt) ? undefined : msToTimestamp(lt),
  };
}

/** BackendSnapshot → driver.proto `Sandbox`, for drivers written in TypeScript (and the example driver). */
export function snapshotToWire(s: BackendSnapshot): WireSandbox {
  const endpoint: Pick<WireSandbox, 'addresses' | 'service_fqdn' | 'relay_only'> =
    s.endpoint.kind === 'address'
      ? { addresses: { addresses: [...s.endpoint.addresses] } }
      : s.endpoint.kind === 'service'
        ? { service_fqdn: s.endpoint.fqdn }
        : { relay_only: {} };
  return {
    namespace: s.namespace,
    name: s.name,
    uid: s.uid,
    resource_version: s.resourceVersion,
    instance_id: s.instanceId,
    ids: [...s.ids],
    state: STATE_TO_WIRE[s.state],
    conditions: s.conditions.map(conditionToWire),
    ...endpoint,
    session_model: s.sessionModel === 'none' ? 'SESSION_MODEL_NONE' : 'SESSION_MODEL_REQUIRED',
    ports: s.ports === undefined ? [] : [...s.ports],
    h2c_ports: s.h2cPorts === undefined ? [] : [...s.h2cPorts],
    tcp_ports: s.tcpPorts === undefined ? [] : [...s.tcpPorts],
    public_ports: s.publicPorts === undefined ? [] : [...s.publicPorts],
    access: s.access === undefined ? '' : JSON.stringify(sandboxAccessToGrammar(s.access)),
    shutdown_time: s.shutdownTime === undefined ? undefined : msToTimestamp(s.shutdownTime),
    revision: s.revision === undefined ? undefined : { desired: s.revision.desired, current: s.revision.current },
    created_at: s.createdAt === undefined ? undefined : msToTimestamp(s.createdAt),
    envd_access_token: s.envdAccessToken ?? '',
    idle_timeout: s.idleTimeoutMs === undefined ? undefined : msToTimestamp(s.idleTimeoutMs),
    wake_timeout: s.wakeTimeoutMs === undefined ? undefined : msToTimestamp(s.wakeTimeoutMs),
  };
}

/** A delete DriverEvent → driver.proto `Deleted`. */
export function deletionToWire(e: Extract<DriverEvent, { type: 'delete' }>): WireDeleted {
  return { namespace: e.namespace, name: e.name, uid: e.uid, resource_version: e.resourceVersion };
}

import { Reader, WIRE } from '../../lib/protobuf-reader.js';
import type { WireCondition, WireDeleted, WireSandbox, WireTimestamp, WireWatchEvent } from './driver-proto.js';

/**
 * A hand-written decoder of driver.proto's `WatchEvent`, the message a busy driver streams thousands of
 * times a second. It yields the values @grpc/proto-loader yields with DRIVER_PROTO_OPTIONS (the test
 * `watch-event-decoder` compares both on generated messages): fields present on the wire only — except
 * that a Sandbox carries every field, undefined where the message has none (one shape, allocated once),
 * which every reader treats as absent — repeated fields always arrays (an empty one shared and frozen),
 * enums by name (an unknown number stays a number), int64 as a decimal string, the oneof member names in
 * `event` / `endpoint`, a repeated message field replaced rather than merged, and every unknown field
 * skipped — as is a known field sent with another wire type (protobufjs misreads one). It reads the bytes
 * once into the final objects, where protobufjs builds a message and then copies it with `toObject()`,
 * a large share of the gateway's cost per update. Malformed bytes throw, and grpc-js then ends the call
 * with INTERNAL, as for proto-loader's decoder; the driver reconnects.
 */

const BACKEND_STATES = ['BACKEND_STATE_UNSPECIFIED', 'BACKEND_STATE_STARTING', 'BACKEND_STATE_READY', 'BACKEND_STATE_PAUSED', 'BACKEND_STATE_DELETING', 'BACKEND_STATE_FAILED'] as const;
const CONDITION_STATUSES = ['CONDITION_STATUS_UNSPECIFIED', 'CONDITION_STATUS_TRUE', 'CONDITION_STATUS_FALSE', 'CONDITION_STATUS_UNKNOWN'] as const;
const SESSION_MODELS = ['SESSION_MODEL_REQUIRED', 'SESSION_MODEL_NONE'] as const;

/** Reads one nested message with `read`, the reader narrowed to it. */
function nested<T>(r: Reader, read: (r: Reader) => T): T {
  const outer = r.enter();
  const v = read(r);
  r.leave(outer);
  return v;
}

/** A nested message whose content is ignored (an empty marker message such as `synced`). */
function skipNested(r: Reader): void {
  r.leave(r.enter());
}

/**
 * A repeated field's array, shared while empty: most sandboxes list no ports and one id or condition, and
 * `[]` grown by push() takes room for 17 entries. Frozen, so nothing can add to the shared one; the codec
 * only reads these arrays.
 */
const EMPTY: readonly never[] = Object.freeze([]);

function append<T>(list: readonly T[], v: T): T[] {
  if (list.length === 0) return [v];
  (list as T[]).push(v);
  return list as T[];
}

/** A packed repeated uint32 field's values, appended to `list` (what the field held so far). */
function packedUint32s(r: Reader, list: readonly number[]): readonly number[] {
  const outer = r.enter();
  while (r.pos < r.end) list = append(list, r.uint32());
  r.leave(outer);
  return list;
}

/** An enum value by name, or the number itself when the enum has no such value (as proto-loader does). */
function enumName<T extends string>(names: readonly T[], n: number): T | number {
  return n >= 0 && n < names.length ? names[n]! : n;
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

function timestamp(r: Reader): WireTimestamp {
  const t: Mutable<WireTimestamp> = {};
  while (r.pos < r.end) {
    const tag = r.uint32();
    if (tag === 0x08) t.seconds = r.int64String();
    else if (tag === 0x10) t.nanos = r.int32();
    else r.skip(tag & 7);
  }
  return t;
}

function condition(r: Reader): WireCondition {
  const c: Mutable<WireCondition> = {};
  while (r.pos < r.end) {
    const tag = r.uint32();
    switch (tag) {
      case 0x0a:
        c.type = r.string();
        break;
      case 0x10:
        c.status = enumName(CONDITION_STATUSES, r.int32());
        break;
      case 0x1a:
        c.reason = r.string();
        break;
      case 0x22:
        c.message = r.string();
        break;
      case 0x2a:
        c.last_transition_time = nested(r, timestamp);
        break;
      default:
        r.skip(tag & 7);
    }
  }
  return c;
}

/** Field 1 of a message, a repeated string (driver.proto's `Addresses`). */
function strings(r: Reader): readonly string[] {
  let out: readonly string[] = EMPTY;
  while (r.pos < r.end) {
    const tag = r.uint32();
    if (tag === ((1 << 3) | WIRE.BYTES)) out = append(out, r.string());
    else r.skip(tag & 7);
  }
  return out;
}

/** driver.proto `Revision` (desired = 1, current = 2). */
function revision(r: Reader): { desired?: string; current?: string } {
  const out: { desired?: string; current?: string } = {};
  while (r.pos < r.end) {
    const tag = r.uint32();
    if (tag === 0x0a) out.desired = r.string();
    else if (tag === 0x12) out.current = r.string();
    else r.skip(tag & 7);
  }
  return out;
}

/**
 * Every WireSandbox field, in one shape: the object is allocated once at its full size instead of growing a
 * property at a time. A field the message does not carry stays undefined here, which every reader of a
 * WireSandbox (sandbox-codec.ts) treats as absent, as it does a field proto-loader leaves out.
 */
function emptySandbox(): Mutable<WireSandbox> {
  return {
    namespace: undefined,
    name: undefined,
    uid: undefined,
    resource_version: undefined,
    instance_id: undefined,
    ids: EMPTY,
    state: undefined,
    conditions: EMPTY,
    endpoint: undefined,
    addresses: undefined,
    service_fqdn: undefined,
    relay_only: undefined,
    session_model: undefined,
    ports: EMPTY,
    shutdown_time: undefined,
    revision: undefined,
    created_at: undefined,
    envd_access_token: undefined,
    idle_timeout: undefined,
    wake_timeout: undefined,
    h2c_ports: EMPTY,
    public_ports: EMPTY,
    tcp_ports: EMPTY,
    access: undefined,
  };
}

// One case per field, in driver.proto's order, each reading its own wire form: a table of field readers
// would add a lookup and an indirect call per field on the path every driver update takes.
function sandbox(r: Reader): WireSandbox {
  const s = emptySandbox();
  while (r.pos < r.end) {
    const tag = r.uint32();
    switch (tag) {
      case 0x0a:
        s.namespace = r.string();
        break;
      case 0x12:
        s.name = r.string();
        break;
      case 0x1a:
        s.uid = r.string();
        break;
      case 0x22:
        s.resource_version = r.string();
        break;
      case 0x2a:
        s.instance_id = r.string();
        break;
      case 0x32:
        s.ids = append(s.ids!, r.string());
        break;
      case 0x38:
        s.state = enumName(BACKEND_STATES, r.int32());
        break;
      case 0x42:
        s.conditions = append(s.conditions!, nested(r, condition));
        break;
      case 0x4a:
        s.addresses = { addresses: nested(r, strings) };
        break;
      case 0x52:
        s.service_fqdn = r.string();
        break;
      case 0x5a:
        skipNested(r);
        s.relay_only = {};
        break;
      case 0x60:
        s.session_model = enumName(SESSION_MODELS, r.int32());
        break;
      case 0x68:
        s.ports = append(s.ports!, r.uint32());
        break;
      case 0x6a:
        // Packed (proto3's default for repeated scalars); the unpacked form above is accepted too.
        s.ports = packedUint32s(r, s.ports!);
        break;
      case 0x72:
        s.shutdown_time = nested(r, timestamp);
        break;
      case 0x7a:
        s.revision = nested(r, revision);
        break;
      case 0x82:
        // Field 16 (created_at): its tag takes two varint bytes, read above as 0x82 0x01 → 130.
        s.created_at = nested(r, timestamp);
        break;
      case 0x8a:
        s.envd_access_token = r.string();
        break;
      case 0x92:
        // Fields 18 and 19 (idle_timeout, wake_timeout): google.protobuf.Duration has a Timestamp's fields.
        s.idle_timeout = nested(r, timestamp);
        break;
      case 0x9a:
        s.wake_timeout = nested(r, timestamp);
        break;
      case 0xa0:
        // Field 20 (h2c_ports), unpacked and packed (0xa2) like ports.
        s.h2c_ports = append(s.h2c_ports!, r.uint32());
        break;
      case 0xa2:
        s.h2c_ports = packedUint32s(r, s.h2c_ports!);
        break;
      case 0xa8:
        // Field 21 (public_ports), unpacked and packed (0xaa) like ports.
        s.public_ports = append(s.public_ports!, r.uint32());
        break;
      case 0xaa:
        s.public_ports = packedUint32s(r, s.public_ports!);
        break;
      case 0xb0:
        // Field 22 (tcp_ports), unpacked and packed (0xb2) like ports.
        s.tcp_ports = append(s.tcp_ports!, r.uint32());
        break;
      case 0xb2:
        s.tcp_ports = packedUint32s(r, s.tcp_ports!);
        break;
      case 0xba:
        // Field 23 (access): its tag takes two varint bytes, 0xba 0x01 → 186.
        s.access = r.string();
        break;
      default:
        r.skip(tag & 7);
    }
  }
  // proto-loader (oneofs: true) names the member of `endpoint` last in declaration order among those set.
  if (s.relay_only !== undefined) s.endpoint = 'relay_only';
  else if (s.service_fqdn !== undefined) s.endpoint = 'service_fqdn';
  else if (s.addresses !== undefined) s.endpoint = 'addresses';
  return s;
}

// Deleted numbers its first four fields as Sandbox does, so its switch reads like the start of sandbox()'s:
// tags are per message, and one switch per message, each case a field of that message, is what keeps this
// decoder checkable against driver.proto.
function deleted(r: Reader): WireDeleted {
  const d: Mutable<WireDeleted> = {};
  while (r.pos < r.end) {
    const tag = r.uint32();
    switch (tag) {
      case 0x0a:
        d.namespace = r.string();
        break;
      case 0x12:
        d.name = r.string();
        break;
      case 0x1a:
        d.uid = r.string();
        break;
      case 0x22:
        d.resource_version = r.string();
        break;
      default:
        r.skip(tag & 7);
    }
  }
  return d;
}

function eventBatch(r: Reader): { events: WireWatchEvent[] } {
  const events: WireWatchEvent[] = [];
  while (r.pos < r.end) {
    const tag = r.uint32();
    if (tag === 0x0a) events.push(nested(r, watchEvent));
    else r.skip(tag & 7);
  }
  return { events };
}

/** driver.proto `WatchEvent` bytes → the object proto-loader would give (see above). Throws on malformed bytes. */
export function decodeWatchEvent(buf: Buffer): WireWatchEvent {
  return watchEvent(new Reader(buf, 0, buf.length));
}

function watchEvent(r: Reader): WireWatchEvent {
  const ev: Mutable<WireWatchEvent> = {};
  while (r.pos < r.end) {
    const tag = r.uint32();
    switch (tag) {
      case 0x0a:
        ev.snapshot = nested(r, sandbox);
        break;
      case 0x12:
        skipNested(r);
        ev.synced = {};
        break;
      case 0x1a:
        ev.upserted = nested(r, sandbox);
        break;
      case 0x22:
        ev.deleted = nested(r, deleted);
        break;
      case 0x2a:
        ev.batch = nested(r, eventBatch);
        break;
      default:
        r.skip(tag & 7);
    }
  }
  if (ev.batch !== undefined) ev.event = 'batch';
  else if (ev.deleted !== undefined) ev.event = 'deleted';
  else if (ev.upserted !== undefined) ev.event = 'upserted';
  else if (ev.synced !== undefined) ev.event = 'synced';
  else if (ev.snapshot !== undefined) ev.event = 'snapshot';
  return ev;
}

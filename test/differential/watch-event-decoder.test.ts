import { join } from 'node:path';
import protobuf, { type Field, type Type } from 'protobufjs';
import { describe, expect, it } from 'vitest';
import { DRIVER_PROTO, DRIVER_PROTO_OPTIONS, defaultProtoDir } from '../../src/drivers/grpc/driver-proto.js';
import { decodeWatchEvent } from '../../src/drivers/grpc/watch-event-decoder.js';
import { fuzzPlan } from '../helpers/fuzz.js';

// The reference: driver.proto loaded by protobufjs itself, and its objects mapped as @grpc/proto-loader maps
// them for the gateway (decode, then toObject with DRIVER_PROTO_OPTIONS). Generators and the field walk
// below read the descriptor, not a copy of it, so a field added to driver.proto is generated and checked.
const root = new protobuf.Root().loadSync(join(defaultProtoDir(), DRIVER_PROTO), { keepCase: true });
root.resolveAll();
const WATCH_EVENT = root.lookupType('sandgate.driver.v1.WatchEvent');

const encode = (type: Type, object: Record<string, unknown>): Buffer => Buffer.from(type.encode(type.fromObject(object)).finish());
const reference = (buf: Buffer): unknown => WATCH_EVENT.toObject(WATCH_EVENT.decode(buf), DRIVER_PROTO_OPTIONS);

type Rand = () => number;

const int = (rand: Rand, n: number): number => Math.floor(rand() * n);
const pick = <T>(rand: Rand, items: readonly T[]): T => items[int(rand, items.length)]!;

/** Code points from every UTF-8 length (1 to 4 bytes), surrogates excluded: valid proto3 strings only. */
const CODE_POINT_RANGES: readonly (readonly [number, number])[] = [
  [0x00, 0x7f],
  [0x80, 0x7ff],
  [0x800, 0xd7ff],
  [0xe000, 0xffff],
  [0x10000, 0x10ffff],
];

function randomString(rand: Rand): string {
  const length = rand() < 0.05 ? 200 + int(rand, 300) : int(rand, 12);
  let s = '';
  for (let i = 0; i < length; i++) {
    const [lo, hi] = pick(rand, CODE_POINT_RANGES);
    s += String.fromCodePoint(lo + int(rand, hi - lo + 1));
  }
  return s;
}

function random64(rand: Rand, signed: boolean): string {
  const bits = (BigInt(int(rand, 2 ** 32)) << 32n) | BigInt(int(rand, 2 ** 32));
  const shifted = bits >> BigInt(int(rand, 64));
  const edge = pick(rand, [0n, 1n, -1n, 2n ** 53n + 1n, 2n ** 63n - 1n, -(2n ** 63n), shifted, shifted, shifted]);
  return (signed ? BigInt.asIntN(64, edge) : BigInt.asUintN(64, edge)).toString();
}

function random32(rand: Rand, signed: boolean): number {
  const edge = pick(rand, [0, 1, -1, 2 ** 31 - 1, -(2 ** 31), int(rand, 2 ** 32), int(rand, 200)]);
  return signed ? edge | 0 : edge >>> 0;
}

/**
 * A random value of one scalar type, in the form protobufjs's fromObject takes. One case per protobuf
 * scalar type name, grouped by the value range they share, so a type driver.proto adds is seen missing here.
 */
function randomScalar(type: string, rand: Rand): unknown {
  switch (type) {
    case 'string':
      return randomString(rand);
    case 'bytes':
      return Buffer.from(randomString(rand));
    case 'bool':
      return rand() < 0.5;
    case 'double':
    case 'float':
      return pick(rand, [0, 1.5, -2.25, 1e10]);
    case 'int32':
    case 'sint32':
    case 'sfixed32':
      return random32(rand, true);
    case 'uint32':
    case 'fixed32':
      return random32(rand, false);
    case 'int64':
    case 'sint64':
    case 'sfixed64':
      return random64(rand, true);
    case 'uint64':
    case 'fixed64':
      return random64(rand, false);
    default:
      throw new Error(`no generator for the protobuf type ${type}: teach this test about it`);
  }
}

/** Deep enough for a batch inside a batch (WatchEvent → EventBatch → WatchEvent → …); below, no messages. */
const MAX_DEPTH = 6;

function randomValue(field: Field, rand: Rand, depth: number): unknown {
  const resolved = field.resolvedType;
  if (resolved instanceof protobuf.Type) return randomMessage(resolved, rand, depth + 1);
  if (resolved instanceof protobuf.Enum) {
    const names = Object.keys(resolved.values);
    // By name, by number, or a number the enum does not define (proto3 enums are open).
    const r = rand();
    return r < 0.5 ? pick(rand, names) : r < 0.9 ? resolved.values[pick(rand, names)] : 100 + int(rand, 1000);
  }
  return randomScalar(field.type, rand);
}

const isMessage = (field: Field): boolean => field.resolvedType instanceof protobuf.Type;

/** A random valid message of `type`: every field maybe set (defaults too), at most one member per oneof. */
function randomMessage(type: Type, rand: Rand, depth: number): Record<string, unknown> {
  const deep = depth >= MAX_DEPTH;
  const chosen = new Set<Field>();
  for (const oneof of type.oneofsArray) {
    const members = oneof.fieldsArray.filter((f) => !(deep && isMessage(f)));
    if (members.length > 0 && rand() < 0.8) chosen.add(pick(rand, members));
  }
  const out: Record<string, unknown> = {};
  for (const field of type.fieldsArray) {
    if (field.partOf !== null ? !chosen.has(field) : rand() < 0.3 || (deep && isMessage(field))) continue;
    const count = int(rand, 4);
    if (field instanceof protobuf.MapField) {
      out[field.name] = Object.fromEntries(Array.from({ length: count }, () => [String(randomScalar(field.keyType, rand)), randomValue(field, rand, depth)]));
    } else if (field.repeated) out[field.name] = Array.from({ length: count }, () => randomValue(field, rand, depth));
    else out[field.name] = randomValue(field, rand, depth);
  }
  return out;
}

/** One step from a message into one of its fields: repeated and map fields are entered at their one entry. */
interface Step {
  readonly type: Type;
  readonly field: Field;
}

const MAP_KEY: Readonly<Record<string, unknown>> = { string: 'k', bool: true };

function describePath(path: readonly Step[]): string {
  return [path[0]!.type.name, ...path.map((s) => s.field.name + (s.field.map ? '{k}' : s.field.repeated ? '[0]' : ''))].join('.');
}

/**
 * Every path from WatchEvent to a field of a reachable message, each message type at most twice on a path
 * (so the fields of an event inside a batch are walked too, and the recursion ends).
 */
function fieldPaths(type: Type, prefix: readonly Step[] = []): Step[][] {
  const paths: Step[][] = [];
  for (const field of type.fieldsArray) {
    const path = [...prefix, { type, field }];
    paths.push(path);
    const next = field.resolvedType;
    if (next instanceof protobuf.Type && path.filter((s) => s.type === next).length < 2) paths.push(...fieldPaths(next, path));
  }
  return paths;
}

/** A value of the field's type other than its default: the last enum value, a present (maybe empty) message. */
function nonDefault(field: Field): unknown {
  const resolved = field.resolvedType;
  if (resolved instanceof protobuf.Type) return {};
  if (resolved instanceof protobuf.Enum) return Math.max(...Object.values(resolved.values));
  const value: Readonly<Record<string, unknown>> = {
    string: 'ünï ✓ 𝄞',
    bytes: Buffer.from([1, 2, 0xff]),
    bool: true,
    double: 1.5,
    float: 1.5,
    int32: -7,
    sint32: -7,
    sfixed32: -7,
    uint32: 4_000_000_000,
    fixed32: 4_000_000_000,
    int64: '-9007199254740993',
    sint64: '-9007199254740993',
    sfixed64: '-9007199254740993',
    uint64: '18446744073709551615',
    fixed64: '18446744073709551615',
  };
  if (!(field.type in value)) throw new Error(`no non-default value for the protobuf type ${field.type}: teach this test about it`);
  return value[field.type];
}

/** In the field's container shape: a one-entry list for a repeated field, a one-entry map for a map. */
function wrap(field: Field, value: unknown): unknown {
  if (field instanceof protobuf.MapField) return { [String(MAP_KEY[field.keyType] ?? 1)]: value };
  return field.repeated ? [value] : value;
}

/** A WatchEvent with exactly the last step's field set (to a non-default value), and the messages on the way. */
function eventWithOnly(path: readonly Step[]): Record<string, unknown> {
  const last = path[path.length - 1]!;
  let message: Record<string, unknown> = { [last.field.name]: wrap(last.field, nonDefault(last.field)) };
  for (let i = path.length - 2; i >= 0; i--) message = { [path[i]!.field.name]: wrap(path[i]!.field, message) };
  return message;
}

/** The value at the end of `path` in a decoded object, entering repeated and map fields at their one entry. */
function valueAt(object: unknown, path: readonly Step[]): unknown {
  let node = object;
  for (const { field } of path) {
    node = (node as Record<string, unknown> | undefined)?.[field.name];
    if (node === undefined) return undefined;
    if (field.map) node = Object.values(node as Record<string, unknown>)[0];
    else if (field.repeated) node = (node as unknown[])[0];
  }
  return node;
}

describe('watch-event-decoder against protobufjs (differential)', () => {
  it('decodes random valid WatchEvents of every field to the objects protobufjs gives', () => {
    const { seed, runs, random } = fuzzPlan(300, 0x5e1ec7ed);
    for (let run = 0; run < runs; run++) {
      const buf = encode(WATCH_EVENT, randomMessage(WATCH_EVENT, random, 0));
      const where = `seed ${seed}, case ${run}`;
      let decoded: unknown;
      expect(() => (decoded = decodeWatchEvent(buf)), where).not.toThrow();
      // toEqual: a Sandbox field the message does not carry is undefined in the decoder's object (one shape
      // for every sandbox) where protobufjs leaves it out; any other difference fails.
      expect(decoded, where).toEqual(reference(buf));
    }
  });

  it('decodes every field of every message reachable from WatchEvent (a field added to driver.proto is checked)', () => {
    const paths = fieldPaths(WATCH_EVENT);
    const reachable = new Set(paths.map((p) => p[p.length - 1]!.type.fullName));
    // The walk reads the real descriptor: the event's messages and the well-known types they embed.
    for (const name of ['.sandgate.driver.v1.Sandbox', '.sandgate.driver.v1.Condition', '.sandgate.driver.v1.Revision', '.google.protobuf.Timestamp', '.google.protobuf.Duration']) {
      expect(reachable, name).toContain(name);
    }
    for (const path of paths) {
      const where = describePath(path);
      const buf = encode(WATCH_EVENT, eventWithOnly(path));
      const want = valueAt(reference(buf), path);
      expect(want, `${where}: protobufjs reads the field back`).toBeDefined();
      const decoded = decodeWatchEvent(buf);
      expect(valueAt(decoded, path), `${where}: the decoder drops or misreads this field (${buf.toString('hex')})`).toEqual(want);
      expect(decoded, `${where}: ${buf.toString('hex')}`).toEqual(reference(buf));
    }
  });
});

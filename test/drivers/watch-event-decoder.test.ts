import { describe, expect, it } from 'vitest';
import { sandboxDriverService, type WireSandbox, type WireWatchEvent } from '../../src/drivers/grpc/driver-proto.js';
import { decodeWatchEvent } from '../../src/drivers/grpc/watch-event-decoder.js';
import { prng } from '../helpers/prng.js';

// The reference: proto-loader's own (de)serializer of driver.proto, loaded with the gateway's options.
const watch = sandboxDriverService().service.WatchSandboxes!;
const encode = (ev: WireWatchEvent): Buffer => watch.responseSerialize(ev);
const reference = (buf: Buffer): unknown => watch.responseDeserialize(buf);

function varint(n: bigint): number[] {
  const out: number[] = [];
  let v = BigInt.asUintN(64, n);
  do {
    const b = Number(v & 0x7fn);
    v >>= 7n;
    out.push(v === 0n ? b : b | 0x80);
  } while (v !== 0n);
  return out;
}

const tag = (field: number, wireType: number): number[] => varint(BigInt((field << 3) | wireType));

/** Fields driver.proto does not define, in every wire type (a newer driver's additions). */
function unknownFields(rand: () => number): Buffer {
  const field = 24 + Math.floor(rand() * 1000);
  switch (Math.floor(rand() * 5)) {
    case 0:
      return Buffer.from([...tag(field, 0), ...varint(BigInt(Math.floor(rand() * 2 ** 40)))]);
    case 1:
      return Buffer.from([...tag(field, 1), 1, 2, 3, 4, 5, 6, 7, 8]);
    case 2:
      return Buffer.from([...tag(field, 2), 3, 0x61, 0x62, 0x63]);
    case 3:
      return Buffer.from([...tag(field, 3), ...tag(1, 0), 5, ...tag(2, 2), 1, 0x7a, ...tag(field, 4)]);
    default:
      return Buffer.from([...tag(field, 5), 9, 9, 9, 9]);
  }
}

function pick<T>(rand: () => number, items: readonly T[]): T {
  return items[Math.floor(rand() * items.length)]!;
}

const WORDS = ['', 'a', 'team-a', 'sbx-0001', 'Ready', 'ünïcødé ✓', '10.0.0.7', 'x'.repeat(300)];

function maybe<T>(rand: () => number, value: () => T): T | undefined {
  return rand() < 0.6 ? value() : undefined;
}

function timestamp(rand: () => number): { seconds: string; nanos: number } {
  const seconds = pick(rand, ['0', '1', '1735689600', '-1', '-62135596800', '9223372036854775807', '-9223372036854775808', String(2 ** 49 + 3)]);
  return { seconds, nanos: pick(rand, [0, 1, 999_999_999, -5]) };
}

function sandbox(rand: () => number): WireSandbox {
  const s: Record<string, unknown> = {
    namespace: maybe(rand, () => pick(rand, WORDS)),
    name: maybe(rand, () => pick(rand, WORDS)),
    uid: maybe(rand, () => pick(rand, WORDS)),
    resource_version: maybe(rand, () => String(Math.floor(rand() * 1e9))),
    instance_id: maybe(rand, () => pick(rand, WORDS)),
    ids: Array.from({ length: Math.floor(rand() * 3) }, () => pick(rand, WORDS)),
    state: maybe(rand, () => pick(rand, ['BACKEND_STATE_READY', 'BACKEND_STATE_PAUSED', 'BACKEND_STATE_FAILED', 2, 9, 300])),
    conditions: Array.from({ length: Math.floor(rand() * 3) }, () => ({
      type: maybe(rand, () => pick(rand, WORDS)),
      status: maybe(rand, () => pick(rand, ['CONDITION_STATUS_TRUE', 'CONDITION_STATUS_UNKNOWN', 7])),
      reason: maybe(rand, () => pick(rand, WORDS)),
      message: maybe(rand, () => pick(rand, WORDS)),
      last_transition_time: maybe(rand, () => timestamp(rand)),
    })),
    session_model: maybe(rand, () => pick(rand, ['SESSION_MODEL_NONE', 'SESSION_MODEL_REQUIRED', 4])),
    ports: Array.from({ length: Math.floor(rand() * 4) }, () => pick(rand, [1, 80, 49983, 65535, 70000, 2 ** 32 - 1])),
    shutdown_time: maybe(rand, () => timestamp(rand)),
    revision: maybe(rand, () => ({ desired: maybe(rand, () => pick(rand, WORDS)), current: maybe(rand, () => pick(rand, WORDS)) })),
    created_at: maybe(rand, () => timestamp(rand)),
    envd_access_token: maybe(rand, () => pick(rand, WORDS)),
    access: maybe(rand, () => pick(rand, WORDS)),
    idle_timeout: maybe(rand, () => timestamp(rand)),
    wake_timeout: maybe(rand, () => timestamp(rand)),
    h2c_ports: Array.from({ length: Math.floor(rand() * 3) }, () => pick(rand, [1, 50051, 70000])),
    public_ports: Array.from({ length: Math.floor(rand() * 3) }, () => pick(rand, [1, 8080])),
    tcp_ports: Array.from({ length: Math.floor(rand() * 3) }, () => pick(rand, [22, 5432, 2 ** 32 - 1])),
  };
  const endpoint = Math.floor(rand() * 4);
  if (endpoint === 1) s.addresses = { addresses: Array.from({ length: Math.floor(rand() * 3) }, () => pick(rand, WORDS)) };
  if (endpoint === 2) s.service_fqdn = pick(rand, WORDS);
  if (endpoint === 3) s.relay_only = {};
  return s as WireSandbox;
}

function event(rand: () => number, depth = 0): WireWatchEvent {
  switch (Math.floor(rand() * (depth < 2 ? 5 : 4))) {
    case 4:
      // Batches, nested too: the decoder reads what the wire says; the driver client refuses nesting.
      return { batch: { events: Array.from({ length: Math.floor(rand() * 4) }, () => event(rand, depth + 1)) } };
    case 0:
      return { snapshot: sandbox(rand) };
    case 1:
      return { synced: {} };
    case 2:
      return { upserted: sandbox(rand) };
    default:
      return { deleted: { namespace: maybe(rand, () => pick(rand, WORDS)), name: maybe(rand, () => pick(rand, WORDS)), uid: maybe(rand, () => pick(rand, WORDS)), resource_version: maybe(rand, () => '7') } };
  }
}

/** Both decoders on one input: the same object, or both throwing. */
function expectSame(buf: Buffer, seed: number): void {
  let want: unknown;
  let refused = false;
  try {
    want = reference(buf);
  } catch {
    refused = true;
  }
  if (refused) expect(() => decodeWatchEvent(buf), `seed ${seed}: proto-loader refused these bytes`).toThrow();
  // toEqual: a Sandbox field the message does not carry is undefined in the decoder's object (one shape for
  // every sandbox) where proto-loader leaves it out; every other difference fails.
  else expect(decodeWatchEvent(buf), `seed ${seed}: ${buf.toString('hex')}`).toEqual(want);
}

describe('watch-event-decoder (the gateway reads WatchEvent bytes exactly as proto-loader would)', () => {
  it('decodes generated events of every kind to the same objects', () => {
    for (let seed = 1; seed <= 400; seed++) {
      const rand = prng(seed);
      expectSame(encode(event(rand)), seed);
    }
  });

  it('skips unknown fields of every wire type, at the top and inside nested messages', () => {
    for (let seed = 1; seed <= 200; seed++) {
      const rand = prng(seed);
      // Unknown fields appended inside the Sandbox (re-framed as field 3 with its new length) and after it.
      const sandboxBytes = Buffer.concat([sandboxOf(encode({ upserted: sandbox(rand) })), unknownFields(rand)]);
      const framed = Buffer.concat([Buffer.from([...tag(3, 2), ...varint(BigInt(sandboxBytes.length))]), sandboxBytes, unknownFields(rand)]);
      expectSame(framed, seed);
      expect((decodeWatchEvent(framed) as { event?: string }).event).toBe('upserted');
    }
  });

  it('follows protobufjs where a message repeats a oneof member or a message field, and reads unpacked ports', () => {
    const a = encode({ snapshot: { name: 'a' } });
    const b = encode({ deleted: { name: 'b' } });
    expectSame(Buffer.concat([a, b]), 1);
    expectSame(Buffer.concat([b, a]), 2);
    expectSame(Buffer.concat([encode({ upserted: { name: 'x', ports: [1, 2] } }), encode({ upserted: { uid: 'u', ports: [3] } })]), 3);
    const unpacked = Buffer.from([...tag(13, 0), ...varint(80n), ...tag(13, 0), ...varint(443n)]);
    expectSame(Buffer.concat([Buffer.from([...tag(3, 2), unpacked.length]), unpacked]), 4);
    expect(decodeWatchEvent(Buffer.concat([Buffer.from([...tag(3, 2), unpacked.length]), unpacked])).upserted?.ports).toEqual([80, 443]);
    const endpoints = encode({ upserted: { addresses: { addresses: ['10.0.0.1'] }, service_fqdn: 'a.b', relay_only: {} } as WireSandbox });
    expectSame(endpoints, 5);
    expectSame(Buffer.alloc(0), 6);
  });

  it('refuses truncated and malformed bytes wherever proto-loader does, and reads every prefix it accepts the same', () => {
    for (let seed = 1; seed <= 60; seed++) {
      const full = encode(event(prng(seed)));
      for (let n = 0; n < full.length; n++) expectSame(full.subarray(0, n), seed);
    }
    const hostile = [
      Buffer.from([0x1a, 0xff, 0xff, 0xff, 0xff, 0x0f]),
      Buffer.from([0x08, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]),
      Buffer.from([0x0e]),
      Buffer.from([0x0f]),
      Buffer.from([...tag(9, 3), ...tag(6, 4)]),
      Buffer.from([...tag(3, 2), 2, ...tag(16, 2)]),
    ];
    hostile.forEach((buf, i) => expectSame(buf, 1000 + i));
  });
});

/** The bytes of the Sandbox inside an encoded `upserted` event (after its tag and length). */
function sandboxOf(ev: Buffer): Buffer {
  let pos = 1;
  let len = 0;
  let shift = 0;
  for (;;) {
    const b = ev[pos++]!;
    len |= (b & 0x7f) << shift;
    if (b < 0x80) break;
    shift += 7;
  }
  return ev.subarray(pos, pos + len);
}

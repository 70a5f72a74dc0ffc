import { describe, expect, it } from 'vitest';
import { encodeCheckAllow, encodeProcessContinue } from '../../src/edge/envoy/response-encoder.js';
import { fuzzPlan } from '../helpers/fuzz.js';
import { CHECK, PROCESS } from '../helpers/grpc-wire.js';

// The reference: the allow answers as objects, encoded by protobufjs with Envoy's protos. Both byte strings
// are decoded by protobufjs and compared, so field order and encoding choices may differ, meaning may not.

type Rand = () => number;
const int = (rand: Rand, n: number): number => Math.floor(rand() * n);

/** Strings of every UTF-8 length, latin1 beyond ASCII, empty, and long (multi-byte length prefixes). */
function text(rand: Rand): string {
  const n = rand() < 0.05 ? 200 + int(rand, 20_000) : int(rand, 12);
  const top = [0x7f, 0xff, 0x7ff, 0xd7ff][int(rand, 4)]!;
  let s = '';
  for (let i = 0; i < n; i++) s += String.fromCodePoint(0x20 + int(rand, top - 0x1f));
  if (rand() < 0.02) s += String.fromCodePoint(0x10000 + int(rand, 0x1000));
  return s;
}

function pairs(rand: Rand): string[] {
  const out: string[] = [];
  for (let i = int(rand, 6); i > 0; i--) out.push(text(rand), text(rand));
  return out;
}

const names = (rand: Rand): string[] => Array.from({ length: int(rand, 5) }, () => text(rand));
const decoded = (def: typeof CHECK, bytes: Buffer): unknown => def.responseDeserialize(bytes);
const OVERWRITE = 'OVERWRITE_IF_EXISTS_OR_ADD';

function checkObject(upstream: string, set: readonly string[], remove: readonly string[]): object {
  const headers = [];
  for (let i = 0; i < set.length; i += 2) headers.push({ header: { key: set[i]!, value: set[i + 1]! }, append_action: OVERWRITE });
  return { status: { code: 0 }, ok_response: { headers, headers_to_remove: remove }, dynamic_metadata: { fields: { upstream: { stringValue: upstream } } } };
}

function processObject(set: readonly string[], remove: readonly string[]): object {
  const set_headers = [];
  for (let i = 0; i < set.length; i += 2) set_headers.push({ header: { key: set[i]!, raw_value: Buffer.from(set[i + 1]!, 'latin1') }, append_action: OVERWRITE });
  return { request_headers: { response: { status: 'CONTINUE', header_mutation: { set_headers, remove_headers: remove }, clear_route_cache: true } } };
}

describe('Envoy allow answers against protobufjs (differential)', () => {
  it('encode the allow of a Check as protobufjs encodes its object', () => {
    const { seed, runs, random } = fuzzPlan(500, 0xa110);
    for (let i = 0; i < runs; i++) {
      const upstream = random() < 0.5 ? `10.0.${int(random, 256)}.${int(random, 256)}:${int(random, 65536)}` : text(random);
      const set = ['x-sandgate-upstream', upstream, ...pairs(random)];
      const remove = names(random);
      const want = decoded(CHECK, CHECK.responseSerialize(checkObject(upstream, set, remove)));
      expect(decoded(CHECK, encodeCheckAllow(upstream, set, remove)), `seed ${seed}, case ${i}`).toEqual(want);
    }
  });

  it('encode the CONTINUE of a ProcessingRequest as protobufjs encodes its object', () => {
    const { seed, runs, random } = fuzzPlan(500, 0xc0de);
    for (let i = 0; i < runs; i++) {
      const set = pairs(random);
      const remove = names(random);
      const want = decoded(PROCESS, PROCESS.responseSerialize(processObject(set, remove)));
      expect(decoded(PROCESS, encodeProcessContinue(set, remove)), `seed ${seed}, case ${i}`).toEqual(want);
    }
  });

  it('writes exactly the bytes it sized: no slack, no overrun, for the Envoy-shaped answer', () => {
    const set = ['x-sandgate-upstream', '10.1.2.3:8080', 'x-sandgate-upstream-protocol', 'h2c', 'cookie', 'theme=dark'];
    const bytes = encodeCheckAllow('10.1.2.3:8080', set, ['x-sandbox-id']);
    expect(bytes.length).toBe(CHECK.responseSerialize(checkObject('10.1.2.3:8080', set, ['x-sandbox-id'])).length);
    expect(encodeProcessContinue(set, []).length).toBe(PROCESS.responseSerialize(processObject(set, [])).length);
  });
});

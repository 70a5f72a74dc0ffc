import { describe, expect, it } from 'vitest';
import type { RouteRequest } from '../../src/domain/route-key.js';
import { decodeCheckRequest, decodeProcessingRequest, type CheckAttributes, type ProcessingMessage } from '../../src/edge/envoy/request-decoder.js';
import { addHeader, lowerCaseHeaders } from '../../src/edge/headers.js';
import { fuzzPlan } from '../helpers/fuzz.js';
import { CHECK, PROCESS } from '../helpers/grpc-wire.js';

// The reference: @grpc/proto-loader's objects (protobufjs decode + toObject, as the gRPC server decodes
// with Envoy's protos), mapped to what the doors read by the mapping the doors applied to those objects.

interface HeaderValue {
  key: string;
  value?: string;
  raw_value?: Buffer;
}

interface CheckObject {
  attributes?: {
    source?: { address?: { socket_address?: { address?: string; port_value?: number } } };
    request?: { http?: { headers?: Record<string, string>; header_map?: { headers?: HeaderValue[] }; host?: string; path?: string; method?: string; scheme?: string } };
  };
}

function referenceCheck(buf: Buffer): CheckAttributes {
  const req = CHECK.requestDeserialize(buf) as CheckObject;
  const http = req.attributes?.request?.http;
  let headers: Record<string, string> = http?.headers ?? {};
  const list = http?.header_map?.headers;
  if (list !== undefined && list.length > 0) {
    headers = {};
    for (const h of list) {
      const v = h.raw_value !== undefined && h.raw_value.length > 0 ? h.raw_value.toString('latin1') : (h.value ?? '');
      addHeader(headers, h.key.toLowerCase(), v);
    }
  }
  const lower = lowerCaseHeaders(headers);
  const scheme = http?.scheme || lower[':scheme'];
  const a = req.attributes?.source?.address?.socket_address;
  const client = a?.address === undefined ? '' : a.port_value === undefined ? a.address : `${a.address}:${a.port_value}`;
  return {
    headers: lower,
    host: http?.host || lower[':authority'] || lower.host,
    path: http?.path || lower[':path'],
    method: http?.method || lower[':method'],
    secure: scheme === 'https',
    httpMethod: http?.method ?? '',
    client,
  };
}

function referenceProcess(buf: Buffer): ProcessingMessage {
  const msg = PROCESS.requestDeserialize(buf) as { request?: string; request_headers?: { headers?: { headers?: HeaderValue[] } }; response_headers?: { headers?: { headers?: HeaderValue[] } } };
  if (msg.request === 'response_headers') {
    const setCookies = (msg.response_headers?.headers?.headers ?? []).filter((h) => (h.key ?? '').toLowerCase() === 'set-cookie').map((h) => (h.raw_value !== undefined && h.raw_value.length > 0 ? h.raw_value.toString('latin1') : (h.value ?? '')));
    return setCookies.length === 0 ? { request: msg.request, route: undefined } : { request: msg.request, route: undefined, setCookies };
  }
  if (msg.request !== 'request_headers') return { request: msg.request, route: undefined };
  const headers: Record<string, string> = {};
  for (const h of msg.request_headers?.headers?.headers ?? []) {
    addHeader(headers, h.key.toLowerCase(), h.raw_value !== undefined && h.raw_value.length > 0 ? h.raw_value.toString('latin1') : (h.value ?? ''));
  }
  const route: RouteRequest = { headers, host: headers[':authority'] ?? headers.host, path: headers[':path'], method: headers[':method'], secure: headers[':scheme'] === 'https' };
  return { request: 'request_headers', route };
}

/** Both decoders on the same bytes: the same answer, or both refuse. Header order is compared too. */
function same<T extends { headers?: unknown; route?: RouteRequest | undefined }>(buf: Buffer, ours: (b: Buffer) => T, reference: (b: Buffer) => T, label: string): void {
  let want: T | Error;
  try {
    want = reference(buf);
  } catch (err) {
    want = err as Error;
  }
  if (want instanceof Error) {
    expect(() => ours(buf), label).toThrow();
    return;
  }
  const got = ours(buf);
  expect({ ...got }, label).toEqual({ ...want });
  const keys = (x: T): string[] => Object.keys((x.route?.headers ?? x.headers ?? {}) as object);
  expect(keys(got), label).toEqual(keys(want));
}

type Rand = () => number;
const int = (rand: Rand, n: number): number => Math.floor(rand() * n);
const pick = <T>(rand: Rand, items: readonly T[]): T => items[int(rand, items.length)]!;
const maybe = (rand: Rand, p = 0.5): boolean => rand() < p;

/** Header names and values that matter to the doors, their near misses, and bytes of every range. */
const NAMES = [':authority', ':path', ':method', ':scheme', 'host', 'Host', 'x-sandbox-id', 'X-Sandbox-Id', 'x-sandgate-upstream', 'cookie', 'accept', 'sec-fetch-mode', 'x-forwarded-for', 'set-cookie', 'Set-Cookie', 'set-cookies', '', '__proto__', 'constructor', '1', '0'];

function randomText(rand: Rand): string {
  const n = maybe(rand, 0.05) ? 300 : int(rand, 10);
  let s = '';
  for (let i = 0; i < n; i++) {
    const r = rand();
    s += String.fromCodePoint(r < 0.7 ? 0x20 + int(rand, 0x5f) : r < 0.85 ? 0x80 + int(rand, 0x780) : r < 0.95 ? 0x800 + int(rand, 0xd000) : 0x10000 + int(rand, 0x1000));
  }
  return s;
}

const name = (rand: Rand): string => (maybe(rand, 0.7) ? pick(rand, NAMES) : randomText(rand));
const value = (rand: Rand): string => (maybe(rand, 0.3) ? pick(rand, ['https', 'http', 'GET', '/p?q=1', 'a.example', 'sandgate_session=t; Path=/', '']) : randomText(rand));

function headerValue(rand: Rand): Record<string, unknown> {
  const h: Record<string, unknown> = {};
  if (maybe(rand, 0.97)) h.key = name(rand);
  if (maybe(rand)) h.value = value(rand);
  if (maybe(rand)) h.raw_value = maybe(rand, 0.8) ? Buffer.from(value(rand), 'utf8') : Buffer.from(Array.from({ length: int(rand, 8) }, () => int(rand, 256)));
  return h;
}

const headerMap = (rand: Rand): Record<string, unknown> => ({ headers: Array.from({ length: maybe(rand, 0.3) ? 0 : 1 + int(rand, 5) }, () => headerValue(rand)) });

/** A CheckRequest with the read fields each maybe present, and fields the doors skip. */
function randomCheck(rand: Rand): Record<string, unknown> {
  const http: Record<string, unknown> = {};
  for (const f of ['id', 'method', 'path', 'host', 'scheme', 'query', 'fragment', 'protocol', 'body']) if (maybe(rand, 0.4)) http[f] = value(rand);
  if (maybe(rand, 0.3)) http.size = String(int(rand, 1e9));
  if (maybe(rand, 0.2)) http.raw_body = Buffer.from(randomText(rand));
  if (maybe(rand, 0.7)) http.headers = Object.fromEntries(Array.from({ length: int(rand, 8) }, () => [name(rand), value(rand)]));
  if (maybe(rand, 0.4)) http.header_map = headerMap(rand);
  const socket = (): Record<string, unknown> => {
    const s: Record<string, unknown> = {};
    if (maybe(rand, 0.8)) s.address = pick(rand, ['203.0.113.7', '::1', '', randomText(rand)]);
    if (maybe(rand, 0.7)) s.port_value = pick(rand, [0, 1, 443, 54321, 65535, 2 ** 32 - 1]);
    else if (maybe(rand, 0.2)) s.named_port = 'http';
    if (maybe(rand, 0.2)) s.protocol = 'UDP';
    return s;
  };
  const peer = (): Record<string, unknown> => {
    const p: Record<string, unknown> = {};
    if (maybe(rand, 0.8)) p.address = maybe(rand, 0.9) ? { socket_address: socket() } : { pipe: { path: '/tmp/s' } };
    if (maybe(rand, 0.2)) p.principal = randomText(rand);
    if (maybe(rand, 0.2)) p.labels = { a: value(rand) };
    return p;
  };
  const attributes: Record<string, unknown> = {};
  if (maybe(rand, 0.8)) attributes.source = peer();
  if (maybe(rand, 0.5)) attributes.destination = peer();
  if (maybe(rand, 0.9)) attributes.request = { ...(maybe(rand) ? { time: { seconds: '1735689600', nanos: 5 } } : {}), ...(maybe(rand, 0.9) ? { http } : {}) };
  if (maybe(rand, 0.3)) attributes.context_extensions = { tenant: value(rand) };
  if (maybe(rand, 0.2)) attributes.metadata_context = { filter_metadata: { 'envoy.filters.http.jwt_authn': { fields: { sub: { stringValue: value(rand) } } } } };
  if (maybe(rand, 0.1)) attributes.tls_session = { sni: value(rand) };
  return maybe(rand, 0.95) ? { attributes } : {};
}

const PROCESS_KINDS = ['request_headers', 'response_headers', 'request_body', 'response_body', 'request_trailers', 'response_trailers'];

function randomProcess(rand: Rand): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (maybe(rand, 0.95)) {
    const kind = maybe(rand, 0.6) ? 'request_headers' : pick(rand, PROCESS_KINDS);
    if (kind.endsWith('_headers')) out[kind] = { ...(maybe(rand, 0.9) ? { headers: headerMap(rand) } : {}), ...(maybe(rand) ? { end_of_stream: maybe(rand) } : {}) };
    else if (kind.endsWith('_body')) out[kind] = { body: Buffer.from(randomText(rand)), end_of_stream: true };
    else out[kind] = maybe(rand) ? { trailers: headerMap(rand) } : {};
  }
  if (maybe(rand, 0.2)) out.observability_mode = true;
  if (maybe(rand, 0.2)) out.metadata_context = { filter_metadata: { a: { fields: { b: { stringValue: value(rand) } } } } };
  return out;
}

function varint(n: number): Buffer {
  const out: number[] = [];
  for (; n >= 0x80; n >>>= 7) out.push((n & 0x7f) | 0x80);
  out.push(n);
  return Buffer.from(out);
}

/** The content of the last length-delimited field `n` of a (valid, top-level) message, or none. */
function lastField(buf: Buffer, n: number): Buffer {
  let found: Buffer = Buffer.alloc(0);
  let at = 0;
  const read = (): number => {
    let v = 0;
    for (let shift = 0; ; shift += 7) {
      const b = buf[at++]!;
      v += (b & 0x7f) * 2 ** shift;
      if (b < 0x80) return v;
    }
  };
  while (at < buf.length) {
    const t = read();
    const wire = t % 8;
    if (wire === 0) read();
    else if (wire === 1) at += 8;
    else if (wire === 5) at += 4;
    else {
      const len = read();
      if (Math.floor(t / 8) === n) found = buf.subarray(at, at + len);
      at += len;
    }
  }
  return found;
}

/** `body` as the content of the message at `path` (field numbers from the top), every level one field. */
function wrap(path: readonly number[], body: Buffer): Buffer {
  for (let i = path.length - 1; i >= 0; i--) body = Buffer.concat([varint((path[i]! << 3) | 2), varint(body.length), body]);
  return body;
}

const CHECK_PATHS: readonly (readonly number[])[] = [[1], [1, 1], [1, 1, 1], [1, 1, 1, 1], [1, 4], [1, 4, 2], [1, 4, 2, 13]];
const PROCESS_PATHS: readonly (readonly number[])[] = [[2], [2, 1]];

/**
 * Wire-level variations of valid messages: alone, truncated at a random byte, two concatenated, and two
 * nested messages at one path concatenated (protobuf's merge: a message field sent twice at that level,
 * which protobufjs replaces; a oneof member after another; repeated fields appended).
 */
function variants(rand: Rand, encode: () => Buffer, paths: readonly (readonly number[])[]): Buffer[] {
  const a = encode();
  const b = encode();
  const path = pick(rand, paths);
  const at = (m: Buffer): Buffer => path.reduce(lastField, m);
  return [a, a.subarray(0, int(rand, a.length + 1)), Buffer.concat([a, b]), wrap(path, Buffer.concat([at(a), at(b)]))];
}

/** Messages shaped as Envoy's filters send them for a browser request (ext_authz: headers map or header_map; ext_proc: raw_value). */
function envoyShaped(i: number): { check: Buffer[]; process: Buffer } {
  const headers: Record<string, string> = {
    ':authority': `8080-sb-${i}.team-a.sandbox.example.com`,
    ':path': '/api/v1/files?path=%2Fhome%2Fuser',
    ':method': 'GET',
    ':scheme': 'https',
    'user-agent': 'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0 Safari/537.36',
    accept: 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8',
    'accept-encoding': 'gzip, deflate, br, zstd',
    'accept-language': 'en-US,en;q=0.9',
    cookie: 'session=3f9a6c1e2b7d4a58; theme=dark',
    'sec-fetch-mode': 'navigate',
    'sec-fetch-site': 'none',
    'upgrade-insecure-requests': '1',
    'x-forwarded-for': '203.0.113.7',
    'x-forwarded-proto': 'https',
    'x-request-id': `6c1e2b7d-4a58-4f9a-8c1e-${String(i).padStart(12, '0')}`,
  };
  const http = { id: String(1e17 + i), method: 'GET', path: headers[':path'], host: headers[':authority'], scheme: 'https', protocol: 'HTTP/2' };
  const attributes = {
    source: { address: { socket_address: { address: '203.0.113.7', port_value: 40000 + i } } },
    destination: { address: { socket_address: { address: '10.1.0.1', port_value: 443 } } },
    request: { time: { seconds: '1735689600', nanos: 123_000_000 }, http },
    metadata_context: {},
  };
  const list = Object.entries(headers).map(([key, v]) => ({ key, raw_value: Buffer.from(v) }));
  return {
    check: [
      CHECK.requestSerialize({ attributes: { ...attributes, request: { ...attributes.request, http: { ...http, headers } } } }),
      CHECK.requestSerialize({ attributes: { ...attributes, request: { ...attributes.request, http: { ...http, header_map: { headers: list } } } } }),
    ],
    process: PROCESS.requestSerialize({ request_headers: { headers: { headers: list }, end_of_stream: true } }),
  };
}

describe('Envoy request decoders against proto-loader (differential)', () => {
  it('read Envoy-shaped CheckRequests and ProcessingRequests as the doors read proto-loader objects', () => {
    for (let i = 0; i < 20; i++) {
      const m = envoyShaped(i);
      for (const b of m.check) same(b, decodeCheckRequest, referenceCheck, `check ${i}`);
      same(m.process, decodeProcessingRequest, referenceProcess, `process ${i}`);
      expect(decodeCheckRequest(m.check[0]!).host).toBe(`8080-sb-${i}.team-a.sandbox.example.com`);
    }
  });

  it('read random CheckRequests, concatenated and truncated ones, as proto-loader does', () => {
    const { seed, runs, random } = fuzzPlan(400, 0xc4ec);
    for (let i = 0; i < runs; i++) {
      for (const b of variants(random, () => CHECK.requestSerialize(randomCheck(random)), CHECK_PATHS)) {
        same(b, decodeCheckRequest, referenceCheck, `seed ${seed}, case ${i}, bytes ${b.toString('hex')}`);
      }
    }
  });

  it('read random ProcessingRequests, concatenated and truncated ones, as proto-loader does', () => {
    const { seed, runs, random } = fuzzPlan(400, 0x9e0c);
    for (let i = 0; i < runs; i++) {
      for (const b of variants(random, () => PROCESS.requestSerialize(randomProcess(random)), PROCESS_PATHS)) {
        same(b, decodeProcessingRequest, referenceProcess, `seed ${seed}, case ${i}, bytes ${b.toString('hex')}`);
      }
    }
  });

  it('refuse malformed bytes: a length past the end, a bad wire type, an unterminated varint', () => {
    for (const hex of ['0a05', '0a0322', '0f', '0aff', '0a02ffff', '0a0a22082a0612047a7a7a']) {
      const b = Buffer.from(hex, 'hex');
      expect(() => decodeCheckRequest(b), hex).toThrow();
      expect(() => CHECK.requestDeserialize(b), hex).toThrow();
    }
    for (const hex of ['1205', '0f', '12020a', '1204a0a0a0a0']) {
      const b = Buffer.from(hex, 'hex');
      expect(() => decodeProcessingRequest(b), hex).toThrow();
      expect(() => PROCESS.requestDeserialize(b), hex).toThrow();
    }
  });
});

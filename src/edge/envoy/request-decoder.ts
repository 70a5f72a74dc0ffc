import type { HeaderMap, RouteRequest } from '../../domain/route-key.js';
import { Reader, WIRE } from '../../lib/protobuf-reader.js';
import { addHeader, lowerCaseHeaders } from '../headers.js';

/**
 * The Envoy doors' requests read straight from the wire: of a CheckRequest (ext_authz) and a
 * ProcessingRequest (ext_proc) only what the decision reads — the request's headers, host, path, method
 * and scheme, and the downstream client's address — every other field skipped unread, no message object
 * built. The answers are those the doors computed from @grpc/proto-loader's objects (the test
 * `envoy-request-decoder` compares both on random and Envoy-shaped messages), protobufjs's reading
 * included: a message field sent twice is replaced, not merged; a map entry's missing key or value is
 * ''; the last entry of a repeated map key wins. A known field sent with another wire type is skipped.
 * Malformed bytes throw; the server then ends the call INTERNAL, as for proto-loader's decoder.
 */

/** What ext_authz reads of a CheckRequest: the route request, plus what the access log records. */
export interface CheckAttributes extends RouteRequest {
  /** `attributes.request.http.method` as sent ('' when absent). */
  readonly httpMethod: string;
  /** `attributes.source.address.socket_address` as `address:port` ('' when absent). */
  readonly client: string;
}

/**
 * What ext_proc reads of a ProcessingRequest: which message it is, for request_headers the route request,
 * and for response_headers the sandbox's `set-cookie` values (the one response header the door rewrites).
 */
export interface ProcessingMessage {
  /** The member of the `request` oneof (the last one declared, when a peer sends several), or undefined. */
  readonly request: string | undefined;
  /** Present when `request` is `request_headers`. */
  readonly route: RouteRequest | undefined;
  /** Present when `request` is `response_headers`: each `set-cookie` value in order (raw_value as latin1, else value). */
  readonly setCookies?: readonly string[] | undefined;
}

const tag = (field: number, wireType: number): number => (field << 3) | wireType;
const LEN = WIRE.BYTES;

/** HttpRequest's fields, and HeaderMap's HeaderValue, as they are read. */
class Fields {
  method: string | undefined = undefined;
  path: string | undefined = undefined;
  host: string | undefined = undefined;
  scheme: string | undefined = undefined;
  /** The `headers` map (names as sent), and `header_map` (names lower-cased, repeats joined). */
  map: Record<string, string> | undefined = undefined;
  list: Record<string, string> | undefined = undefined;
  address: string | undefined = undefined;
  port: number | undefined = undefined;

  resetHttp(): void {
    this.method = this.path = this.host = this.scheme = undefined;
    this.map = this.list = undefined;
  }
}

/** Decodes an `envoy.service.auth.v3.CheckRequest`. */
export function decodeCheckRequest(buf: Buffer): CheckAttributes {
  const r = new Reader(buf, 0, buf.length);
  const s = new Fields();
  while (r.pos < r.end) {
    const t = r.uint32();
    if (t === tag(1, LEN)) {
      s.resetHttp();
      s.address = s.port = undefined;
      nested(r, s, attributeContext);
    } else r.skip(t & 7);
  }
  const headers: HeaderMap = s.list !== undefined ? known(s.list) : s.map === undefined ? {} : lowerCaseHeaders(s.map);
  const scheme = s.scheme || headers[':scheme'];
  const client = s.address === undefined ? '' : s.port === undefined ? s.address : `${s.address}:${s.port}`;
  return {
    headers,
    host: s.host || headers[':authority'] || headers.host,
    path: s.path || headers[':path'],
    method: s.method || headers[':method'],
    secure: scheme === 'https',
    httpMethod: s.method ?? '',
    client,
  };
}

/** Decodes an `envoy.service.ext_proc.v3.ProcessingRequest`. */
export function decodeProcessingRequest(buf: Buffer): ProcessingMessage {
  const r = new Reader(buf, 0, buf.length);
  let last = 0;
  let headers: Record<string, string> | undefined;
  let setCookies: string[] | undefined;
  while (r.pos < r.end) {
    const t = r.uint32();
    const field = t >>> 3;
    // The `request` oneof: fields 2 (request_headers) to 7 (response_trailers), in declaration order.
    if (field >= 2 && field <= 7 && (t & 7) === LEN) {
      if (field > last) last = field;
      if (field === 2) headers = httpHeaders(r);
      else if (field === 3) setCookies = responseSetCookies(r);
      else r.leave(r.enter());
    } else r.skip(t & 7);
  }
  if (last === 3) return setCookies!.length === 0 ? PASS_THROUGH[0]! : { request: 'response_headers', route: undefined, setCookies };
  if (last !== 2) return last === 0 ? NO_REQUEST : PASS_THROUGH[last - 3]!;
  const h = known(headers!);
  return { request: 'request_headers', route: { headers: h, host: h[':authority'] ?? h.host, path: h[':path'], method: h[':method'], secure: h[':scheme'] === 'https' } };
}

const NO_REQUEST: ProcessingMessage = Object.freeze({ request: undefined, route: undefined });
const PASS_THROUGH: readonly ProcessingMessage[] = ['response_headers', 'request_body', 'response_body', 'request_trailers', 'response_trailers'].map((request) =>
  Object.freeze({ request, route: undefined }),
);

function nested(r: Reader, s: Fields, read: (r: Reader, s: Fields) => void): void {
  const outer = r.enter();
  read(r, s);
  r.leave(outer);
}

/** AttributeContext: source (1) and request (4). */
function attributeContext(r: Reader, s: Fields): void {
  while (r.pos < r.end) {
    const t = r.uint32();
    if (t === tag(1, LEN)) {
      s.address = s.port = undefined;
      nested(r, s, peer);
    } else if (t === tag(4, LEN)) {
      s.resetHttp();
      nested(r, s, request);
    } else r.skip(t & 7);
  }
}

/** Peer's address (1), config.core.v3.Address's socket_address (1). */
function peer(r: Reader, s: Fields): void {
  while (r.pos < r.end) {
    const t = r.uint32();
    if (t === tag(1, LEN)) {
      s.address = s.port = undefined;
      nested(r, s, address);
    } else r.skip(t & 7);
  }
}

function address(r: Reader, s: Fields): void {
  while (r.pos < r.end) {
    const t = r.uint32();
    if (t === tag(1, LEN)) {
      s.address = s.port = undefined;
      nested(r, s, socketAddress);
    } else r.skip(t & 7);
  }
}

/** SocketAddress: address (2), port_value (3). */
function socketAddress(r: Reader, s: Fields): void {
  while (r.pos < r.end) {
    const t = r.uint32();
    if (t === tag(2, LEN)) s.address = r.string();
    else if (t === tag(3, WIRE.VARINT)) s.port = r.uint32();
    else r.skip(t & 7);
  }
}

/** AttributeContext.Request: http (2). */
function request(r: Reader, s: Fields): void {
  while (r.pos < r.end) {
    const t = r.uint32();
    if (t === tag(2, LEN)) {
      s.resetHttp();
      nested(r, s, httpRequest);
    } else r.skip(t & 7);
  }
}

/** AttributeContext.HttpRequest: method (2), headers (3), path (4), host (5), scheme (6), header_map (13). */
function httpRequest(r: Reader, s: Fields): void {
  while (r.pos < r.end) {
    const t = r.uint32();
    switch (t) {
      case tag(2, LEN):
        s.method = r.string();
        break;
      case tag(3, LEN): {
        const outer = r.enter();
        mapEntry(r, (s.map ??= {}));
        r.leave(outer);
        break;
      }
      case tag(4, LEN):
        s.path = r.string();
        break;
      case tag(5, LEN):
        s.host = r.string();
        break;
      case tag(6, LEN):
        s.scheme = r.string();
        break;
      case tag(13, LEN): {
        const outer = r.enter();
        const list = headerMap(r);
        r.leave(outer);
        s.list = list;
        break;
      }
      default:
        r.skip(t & 7);
    }
  }
}

/** A map<string, string> entry: key (1), value (2), each '' when absent. */
function mapEntry(r: Reader, map: Record<string, string>): void {
  let key = '';
  let value = '';
  while (r.pos < r.end) {
    const t = r.uint32();
    if (t === tag(1, LEN)) key = r.string();
    else if (t === tag(2, LEN)) value = r.string();
    else r.skip(t & 7);
  }
  // protobufjs makes `__proto__` an own key of a decoded map rather than the object's prototype.
  if (key === '__proto__') Object.defineProperty(map, key, { value, writable: true, enumerable: true, configurable: true });
  else map[key] = value;
}

/** ext_proc's HttpHeaders: headers (1), a config.core.v3.HeaderMap. */
function httpHeaders(r: Reader): Record<string, string> {
  const outer = r.enter();
  let headers: Record<string, string> | undefined;
  while (r.pos < r.end) {
    const t = r.uint32();
    if (t === tag(1, LEN)) {
      const inner = r.enter();
      headers = headerMap(r);
      r.leave(inner);
    } else r.skip(t & 7);
  }
  r.leave(outer);
  return headers ?? {};
}

/** ext_proc's HttpHeaders (response_headers): the `set-cookie` values of its HeaderMap (1), in order; a field sent twice is replaced. */
function responseSetCookies(r: Reader): string[] {
  const outer = r.enter();
  let out: string[] = [];
  while (r.pos < r.end) {
    const t = r.uint32();
    if (t !== tag(1, LEN)) {
      r.skip(t & 7);
      continue;
    }
    const map = r.enter();
    out = [];
    while (r.pos < r.end) {
      const u = r.uint32();
      if (u !== tag(1, LEN)) {
        r.skip(u & 7);
        continue;
      }
      const entry = r.enter();
      let key = '';
      let value = '';
      let raw = '';
      while (r.pos < r.end) {
        const v = r.uint32();
        if (v === tag(1, LEN)) key = r.string();
        else if (v === tag(2, LEN)) value = r.string();
        else if (v === tag(3, LEN)) raw = r.latin1();
        else r.skip(v & 7);
      }
      r.leave(entry);
      if (key.length === 10 && key.toLowerCase() === 'set-cookie') out.push(raw !== '' ? raw : value);
    }
    r.leave(map);
  }
  r.leave(outer);
  return out;
}

/**
 * A HeaderMap holding a HeaderValue without a key: refused, where it is read (the doors could not name
 * such a header; a ProcessingRequest whose headers are not read, or a CheckRequest's replaced header_map,
 * is not refused for it).
 */
const KEYLESS: Record<string, string> = Object.freeze({});

function known(headers: Record<string, string>): Record<string, string> {
  if (headers === KEYLESS) throw new Error('HeaderValue without a key');
  return headers;
}

/**
 * A config.core.v3.HeaderMap's HeaderValues (1) as one lower-case map, repeats joined with ',' — the value
 * is raw_value (3) read as latin1 when non-empty, else value (2); KEYLESS when one has no key. Undefined
 * when the map holds no HeaderValue (ext_authz then reads its `headers` map).
 */
function headerMap(r: Reader): Record<string, string> | undefined {
  let out: Record<string, string> | undefined;
  while (r.pos < r.end) {
    const t = r.uint32();
    if (t !== tag(1, LEN)) {
      r.skip(t & 7);
      continue;
    }
    const outer = r.enter();
    let key: string | undefined;
    let value = '';
    let raw: string | undefined;
    while (r.pos < r.end) {
      const u = r.uint32();
      if (u === tag(1, LEN)) key = r.string();
      else if (u === tag(2, LEN)) value = r.string();
      else if (u === tag(3, LEN)) raw = r.latin1();
      else r.skip(u & 7);
    }
    r.leave(outer);
    if (key === undefined) out = KEYLESS;
    else if (out !== KEYLESS) addHeader((out ??= {}), key.toLowerCase(), raw !== undefined && raw !== '' ? raw : value);
  }
  return out;
}

/**
 * The Envoy doors' allow answers written straight to protobuf's wire format: the few fields an allow
 * carries, sized in one pass and written into one Buffer, where protobufjs would build a message of
 * objects from the answer's objects first. The bytes decode, with protobufjs, to the message the doors'
 * objects encode to (the test `envoy-response-encoder` compares both on random answers). Every header
 * set is an `OVERWRITE_IF_EXISTS_OR_ADD` HeaderValueOption; `set` holds name, value, name, value, …
 */

/** config.core.v3.HeaderValueOption.HeaderAppendAction.OVERWRITE_IF_EXISTS_OR_ADD. */
const OVERWRITE_IF_EXISTS_OR_ADD = 2;

/** How a header value travels: ext_authz's HeaderValue.value (2, UTF-8), ext_proc's raw_value (3, latin1 bytes). */
const enum Value {
  String = 0x12,
  RawLatin1 = 0x1a,
}

function varintSize(n: number): number {
  return n < 0x80 ? 1 : n < 0x4000 ? 2 : n < 0x20_0000 ? 3 : n < 0x1000_0000 ? 4 : 5;
}

/** A length-delimited field's size: the one-byte tag, the length, the content. */
function fieldSize(len: number): number {
  return 1 + varintSize(len) + len;
}

function valueLength(s: string, kind: Value): number {
  return kind === Value.String ? Buffer.byteLength(s, 'utf8') : s.length;
}

/** HeaderValue{key (1), value (2) | raw_value (3)}. */
function headerValueSize(key: string, value: string, kind: Value): number {
  return fieldSize(Buffer.byteLength(key, 'utf8')) + fieldSize(valueLength(value, kind));
}

/** HeaderValueOption{header (1), append_action (3)}. */
function optionSize(key: string, value: string, kind: Value): number {
  return fieldSize(headerValueSize(key, value, kind)) + 2;
}

class Writer {
  pos = 0;

  constructor(readonly buf: Buffer) {}

  byte(b: number): void {
    this.buf[this.pos++] = b;
  }

  varint(n: number): void {
    while (n >= 0x80) {
      this.buf[this.pos++] = (n & 0x7f) | 0x80;
      n >>>= 7;
    }
    this.buf[this.pos++] = n;
  }

  /** A length-delimited field's tag and length; its content follows. */
  head(tag: number, len: number): void {
    this.byte(tag);
    this.varint(len);
  }

  string(tag: number, s: string, len: number, encoding: 'utf8' | 'latin1'): void {
    this.head(tag, len);
    this.pos += this.buf.write(s, this.pos, len, encoding);
  }

  utf8(tag: number, s: string): void {
    this.string(tag, s, Buffer.byteLength(s, 'utf8'), 'utf8');
  }

  option(tag: number, key: string, value: string, kind: Value): void {
    const hv = headerValueSize(key, value, kind);
    this.head(tag, fieldSize(hv) + 2);
    this.head(0x0a, hv);
    this.utf8(0x0a, key);
    this.string(kind, value, valueLength(value, kind), kind === Value.String ? 'utf8' : 'latin1');
    this.byte(0x18);
    this.byte(OVERWRITE_IF_EXISTS_OR_ADD);
  }
}

function optionsSize(set: readonly string[], kind: Value): number {
  let n = 0;
  for (let i = 0; i < set.length; i += 2) n += fieldSize(optionSize(set[i]!, set[i + 1]!, kind));
  return n;
}

function stringsSize(list: readonly string[]): number {
  let n = 0;
  for (const s of list) n += fieldSize(Buffer.byteLength(s, 'utf8'));
  return n;
}

const UPSTREAM_KEY = 'upstream';

/**
 * An ext_authz CheckResponse allow: status {code: 0}, ok_response {headers (2): `set`, headers_to_remove
 * (5): `remove`}, dynamic_metadata {fields: {upstream: {string_value: upstream}}}.
 */
export function encodeCheckAllow(upstream: string, set: readonly string[], remove: readonly string[]): Buffer {
  const ok = optionsSize(set, Value.String) + stringsSize(remove);
  const value = fieldSize(Buffer.byteLength(upstream, 'utf8'));
  const entry = fieldSize(UPSTREAM_KEY.length) + fieldSize(value);
  const metadata = fieldSize(entry);
  const w = new Writer(Buffer.allocUnsafe(4 + fieldSize(ok) + fieldSize(metadata)));
  // status (1): google.rpc.Status {code (1): 0}.
  w.head(0x0a, 2);
  w.byte(0x08);
  w.byte(0);
  w.head(0x1a, ok);
  for (let i = 0; i < set.length; i += 2) w.option(0x12, set[i]!, set[i + 1]!, Value.String);
  for (const h of remove) w.utf8(0x2a, h);
  // dynamic_metadata (4): Struct {fields (1): entry {key (1), value (2): Value {string_value (3)}}}.
  w.head(0x22, metadata);
  w.head(0x0a, entry);
  w.utf8(0x0a, UPSTREAM_KEY);
  w.head(0x12, value);
  w.utf8(0x1a, upstream);
  return w.buf;
}

/**
 * An ext_proc ProcessingResponse to request_headers that continues: request_headers (1) {response (1):
 * CommonResponse {status (1): CONTINUE, header_mutation (2) {set_headers (1): `set` (values in raw_value,
 * latin1), remove_headers (2): `remove`}, clear_route_cache (5): true}}.
 */
export function encodeProcessContinue(set: readonly string[], remove: readonly string[]): Buffer {
  const mutation = optionsSize(set, Value.RawLatin1) + stringsSize(remove);
  const common = 2 + fieldSize(mutation) + 2;
  const headers = fieldSize(common);
  const w = new Writer(Buffer.allocUnsafe(fieldSize(headers)));
  w.head(0x0a, headers);
  w.head(0x0a, common);
  w.byte(0x08);
  w.byte(0);
  w.head(0x12, mutation);
  for (let i = 0; i < set.length; i += 2) w.option(0x0a, set[i]!, set[i + 1]!, Value.RawLatin1);
  for (const h of remove) w.utf8(0x12, h);
  w.byte(0x28);
  w.byte(1);
  return w.buf;
}

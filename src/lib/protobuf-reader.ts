/**
 * A protobuf wire-format reader over one Buffer (protobuf's encoding guide): varints, length-delimited
 * fields read in place, nested messages entered by narrowing the bound. The hand-written decoders
 * (drivers/grpc/watch-event-decoder.ts, edge/envoy/*-decoder.ts) read with it; each has a differential test
 * against protobufjs. Truncated or malformed bytes throw, as protobufjs's reader does.
 */

export const WIRE = { VARINT: 0, FIXED64: 1, BYTES: 2, START_GROUP: 3, END_GROUP: 4, FIXED32: 5 } as const;

const { VARINT, FIXED64, BYTES, START_GROUP, END_GROUP, FIXED32 } = WIRE;

/** Node's Buffer methods behind `toString('utf8' | 'latin1', start, end)`, present on every Buffer but not in its types. */
interface Slicing {
  utf8Slice(start: number, end: number): string;
  latin1Slice(start: number, end: number): string;
}

export class Reader {
  pos: number;

  constructor(
    readonly buf: Buffer,
    start: number,
    public end: number,
  ) {
    this.pos = start;
  }

  /** A varint as an unsigned 32-bit number (protobuf's uint32: the low 32 bits). */
  uint32(): number {
    let value = 0;
    for (let shift = 0; shift < 28; shift += 7) {
      const b = this.byte();
      value |= (b & 0x7f) << shift;
      if (b < 0x80) return value >>> 0;
    }
    const b = this.byte();
    value |= (b & 0x0f) << 28;
    if (b >= 0x80) this.skipVarintTail(5);
    return value >>> 0;
  }

  /** A varint as protobuf's int32 (an enum, nanos): the low 32 bits, signed. */
  int32(): number {
    return this.uint32() | 0;
  }

  /** A varint as a signed 64-bit decimal string (int64 with proto-loader's `longs: String`). */
  int64String(): string {
    const start = this.pos;
    let value = 0;
    let scale = 1;
    // Up to 7 bytes (49 bits) stay exact in a double; longer ones (and every negative) go through BigInt.
    for (let i = 0; i < 7; i++) {
      const b = this.byte();
      value += (b & 0x7f) * scale;
      if (b < 0x80) return String(value);
      scale *= 128;
    }
    this.pos = start;
    let big = 0n;
    for (let shift = 0n; shift < 70n; shift += 7n) {
      const b = this.byte();
      big |= BigInt(b & 0x7f) << shift;
      if (b < 0x80) return BigInt.asIntN(64, big).toString();
    }
    throw new RangeError('invalid varint encoding');
  }

  string(): string {
    const len = this.uint32();
    const start = this.pos;
    this.pos = start + len;
    if (this.pos > this.end) throw new RangeError('index out of range');
    // toString('utf8', …) without its argument checks (bounds are checked above); the same decoding,
    // invalid sequences included (U+FFFD).
    return (this.buf as unknown as Slicing).utf8Slice(start, this.pos);
  }

  /** A bytes field as a latin1 string: one character per byte, as `Buffer.toString('latin1')` gives. */
  latin1(): string {
    const len = this.uint32();
    const start = this.pos;
    this.pos = start + len;
    if (this.pos > this.end) throw new RangeError('index out of range');
    return (this.buf as unknown as Slicing).latin1Slice(start, this.pos);
  }

  /**
   * Narrows the reader to a length-delimited field (a nested message) and returns the bound to restore
   * with leave() once it is read: one reader for the whole event, not one object per nested message.
   */
  enter(): number {
    const len = this.uint32();
    const outer = this.end;
    const end = this.pos + len;
    if (end > outer) throw new RangeError('index out of range');
    this.end = end;
    return outer;
  }

  /** Back to the enclosing message after enter(), past the nested one. */
  leave(outer: number): void {
    this.pos = this.end;
    this.end = outer;
  }

  skip(wireType: number): void {
    switch (wireType) {
      case VARINT:
        this.skipVarintTail(10);
        return;
      case FIXED64:
        this.advance(8);
        return;
      case BYTES:
        this.advance(this.uint32());
        return;
      case START_GROUP:
        // Like protobufjs: up to the next end-group tag, whatever field number it carries.
        for (let t = this.uint32() & 7; t !== END_GROUP; t = this.uint32() & 7) this.skip(t);
        return;
      case FIXED32:
        this.advance(4);
        return;
      default:
        throw new Error(`invalid wire type ${wireType}`);
    }
  }

  private skipVarintTail(maxBytes: number): void {
    for (let i = 0; i < maxBytes; i++) if (this.byte() < 0x80) return;
    throw new RangeError('invalid varint encoding');
  }

  private advance(n: number): void {
    this.pos += n;
    if (this.pos > this.end) throw new RangeError('index out of range');
  }

  private byte(): number {
    if (this.pos >= this.end) throw new RangeError('index out of range');
    return this.buf[this.pos++]!;
  }
}

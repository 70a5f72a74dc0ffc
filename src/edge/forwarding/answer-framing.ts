import type { Duplex } from 'node:stream';

/**
 * The two things the Upgrade path reads of an upstream's HTTP/1.1 answer itself (websocket-tunnel.ts,
 * proxy/h2-websocket.ts): its head, and where a chunked body ends. Both read exactly what node:http's
 * parser (llhttp, strict) reads and refuse what it refuses — test/differential/upgrade-answer.test.ts
 * holds them to that — so a head or a body end is never found where a node:http client would see
 * another.
 */

/** An upstream's answer head, as read off the pipe. */
export interface AnswerHead {
  readonly status: number;
  /** The head's bytes, its blank line included. */
  readonly bytes: Buffer;
  /** Name, value, … as sent (values without surrounding blanks). */
  readonly raw: string[];
}

/** Longest upstream answer head read (node:http's default limit on heads). */
const MAX_ANSWER_HEAD = 16 * 1024;
/** RFC 9112 §4: `HTTP/1.x`, a three-digit status, a reason of anything but CR and LF. */
const STATUS_LINE = /^HTTP\/1\.[01] (\d{3})(?: [^\r\n]*)?$/;
const TOKEN = "[!#$%&'*+.^_`|~0-9A-Za-z-]+";
/** The field lines of a head, each with its CRLF (RFC 9110 §5.5): a token, a colon, a value of blanks, visible ASCII and obs-text. */
const FIELD_LINES = new RegExp(`^(?:${TOKEN}:[\\t\\x20-\\x7e\\x80-\\xff]*\\r\\n)*$`);

const isBlank = (c: number): boolean => c === 0x20 || c === 0x09;

/** `line`'s value after the colon at `colon`, without surrounding blanks (spaces and tabs only). */
function fieldValue(line: string, colon: number): string {
  let from = colon + 1;
  let to = line.length;
  while (from < to && isBlank(line.charCodeAt(from))) from++;
  while (to > from && isBlank(line.charCodeAt(to - 1))) to--;
  return line.slice(from, to);
}

/** A Content-Length value as llhttp reads one (after the colon): digits, spaces after them but no tab. */
const LENGTH_VALUE = /^[\t ]*(\d+) *$/;

/**
 * As llhttp has it: at most one Content-Length, of digits and within 64 bits, and none beside a
 * Transfer-Encoding (RFC 9112 §6.3: such an answer's framing is in doubt). `lines`: the field lines.
 */
function framingAgrees(lines: readonly string[]): boolean {
  let lengths = 0;
  let encoded = false;
  for (const line of lines) {
    const colon = line.indexOf(':');
    const name = line.slice(0, colon).toLowerCase();
    if (name === 'content-length') {
      const digits = LENGTH_VALUE.exec(line.slice(colon + 1))?.[1];
      if (++lengths > 1 || digits === undefined || BigInt(digits) > 0xffffffffffffffffn) return false;
    } else if (name === 'transfer-encoding') encoded = true;
  }
  return !(encoded && lengths > 0);
}

/** Reads the upstream's answer head; `then` gets it (undefined when it is not one) and the bytes after it. */
export function readAnswerHead(up: Duplex, then: (answer: AnswerHead | undefined, rest: Buffer) => void): void {
  let acc: Buffer = Buffer.alloc(0);
  const onData = (chunk: Buffer): void => {
    acc = acc.length === 0 ? chunk : Buffer.concat([acc, chunk]);
    const end = acc.indexOf('\r\n\r\n');
    if (end < 0 && acc.length <= MAX_ANSWER_HEAD) return;
    up.off('data', onData);
    up.pause();
    if (end < 0 || end + 4 > MAX_ANSWER_HEAD) return then(undefined, acc);
    // The status line, then the field lines each with its CRLF.
    const text = acc.subarray(0, end + 2).toString('latin1');
    const eol = text.indexOf('\r\n');
    const m = STATUS_LINE.exec(text.slice(0, eol));
    const fields = text.slice(eol + 2);
    if (m === null || !FIELD_LINES.test(fields)) return then(undefined, acc);
    const lines = fields === '' ? [] : fields.slice(0, -2).split('\r\n');
    if (!framingAgrees(lines)) return then(undefined, acc);
    const raw: string[] = [];
    for (const line of lines) {
      const colon = line.indexOf(':');
      raw.push(line.slice(0, colon), fieldValue(line, colon));
    }
    then({ status: Number(m[1]), bytes: acc.subarray(0, end + 4), raw }, acc.subarray(end + 4));
  };
  up.on('data', onData);
}

/** What ChunkedEnd.feed() returns for bytes that are not chunked framing. */
export const MALFORMED = -1;
/** Hex digits of a size that fits 64 bits (llhttp refuses a longer one), leading zeros aside. */
const MAX_SIZE_DIGITS = 16;
/** Longer than any trailer field line this reads. */
const MAX_LINE = 8 * 1024;

/** RFC 9110 §5.6.2 tchar. */
const TCHAR = new Uint8Array(256);
for (const c of "!#$%&'*+-.^_`|~") TCHAR[c.charCodeAt(0)] = 1;
for (let c = 0x30; c <= 0x39; c++) TCHAR[c] = 1;
for (let c = 0x41; c <= 0x5a; c++) TCHAR[c] = 1;
for (let c = 0x61; c <= 0x7a; c++) TCHAR[c] = 1;
/** A byte of a field value or a quoted string: HTAB, SP, visible ASCII, obs-text. */
const isText = (c: number): boolean => c === 0x09 || (c >= 0x20 && c !== 0x7f);
const hexValue = (c: number): number => (c >= 0x30 && c <= 0x39 ? c - 0x30 : c >= 0x41 && c <= 0x46 ? c - 0x37 : c >= 0x61 && c <= 0x66 ? c - 0x57 : -1);

/**
 * Where a byte is within the chunked framing. A size line: `digits`, then extensions (`;name=value`,
 * the value a token or a quoted string); `cr`: a CR was read, LF must follow; then the chunk's data and
 * its CRLF; after the last chunk, trailer field lines (`name`, then `value`) and the blank line.
 */
type At = 'digits' | 'ext' | 'name' | 'value' | 'token' | 'quoted' | 'escape' | 'quote-end' | 'data' | 'data-cr' | 'field' | 'field-value';

/**
 * Finds where a chunked body ends (RFC 9112 §7.1): the last chunk, its trailer fields and the blank line.
 * Read a byte at a time as llhttp reads it strictly: every line ends in CRLF, no blanks in a size line,
 * extensions and trailer fields in grammar; the first byte out of line is MALFORMED.
 */
export class ChunkedEnd {
  private at: At = 'digits';
  /** A CR was read: the next byte must be LF. */
  private cr = false;
  private digits = 0;
  private size = 0;
  private left = 0;
  private lineLength = 0;
  private last = false;

  /** Feeds the next bytes; returns the offset just past the body's end within them, undefined, or MALFORMED. */
  feed(b: Buffer): number | undefined {
    for (let i = 0; i < b.length; ) {
      if (this.at === 'data') {
        const n = Math.min(this.left, b.length - i);
        this.left -= n;
        i += n;
        if (this.left === 0) this.at = 'data-cr';
        continue;
      }
      const c = b[i++]!;
      if (this.cr) {
        if (c !== 0x0a) return MALFORMED;
        this.cr = false;
        if (this.lineEnd()) return i;
        continue;
      }
      if (c === 0x0d) {
        if (!this.mayEnd()) return MALFORMED;
        this.cr = true;
      } else if (!this.step(c)) return MALFORMED;
    }
    return undefined;
  }

  /** Whether the line may end here. */
  private mayEnd(): boolean {
    switch (this.at) {
      case 'digits':
        return this.lineLength > 0;
      case 'ext':
      case 'quoted':
      case 'escape':
        return false;
      case 'field':
        return this.lineLength === 0;
      default:
        return true;
    }
  }

  /** Takes one byte of a line (not CR); false when it is out of grammar. */
  private step(c: number): boolean {
    if (++this.lineLength > MAX_LINE) return false;
    switch (this.at) {
      case 'digits': {
        const v = hexValue(c);
        if (v >= 0) {
          if (this.size > 0 || v > 0) this.digits++;
          this.size = this.size * 16 + v;
          return this.digits <= MAX_SIZE_DIGITS;
        }
        return c === 0x3b && this.lineLength > 1 && this.to('ext');
      }
      case 'ext':
      case 'name':
        if (c === 0x3b) return this.to('ext');
        if (c === 0x3d) return this.to('value');
        return TCHAR[c] === 1 && this.to('name');
      case 'value':
      case 'token':
        // llhttp lets a quoted string start after token characters too (`a=b"c"`).
        if (c === 0x22) return this.to('quoted');
        return c === 0x3b ? this.to('ext') : TCHAR[c] === 1 && this.to('token');
      case 'quoted':
        if (c === 0x22) return this.to('quote-end');
        return c === 0x5c ? this.to('escape') : isText(c);
      case 'escape':
        return isText(c) && this.to('quoted');
      case 'quote-end':
        return c === 0x3b && this.to('ext');
      case 'field':
        if (c === 0x3a) return this.lineLength > 1 && this.to('field-value');
        return TCHAR[c] === 1;
      case 'field-value':
        return isText(c);
      default:
        // After a chunk's data only its CRLF may come.
        return false;
    }
  }

  private to(at: At): true {
    this.at = at;
    return true;
  }

  /** A line ended (its CRLF read): true when it was the blank line ending the body. */
  private lineEnd(): boolean {
    const blank = this.lineLength === 0;
    this.lineLength = 0;
    if (this.at === 'data-cr') {
      this.at = 'digits';
      return false;
    }
    if (this.last) {
      this.at = 'field';
      return blank;
    }
    if (this.size === 0) {
      this.last = true;
      this.at = 'field';
      return false;
    }
    this.left = this.size;
    this.size = 0;
    this.digits = 0;
    this.at = 'data';
    return false;
  }
}

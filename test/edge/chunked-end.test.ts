import { describe, expect, it } from 'vitest';
import { ChunkedEnd, MALFORMED } from '../../src/edge/forwarding/answer-framing.js';

/** Where a declined upgrade's chunked answer ends (src/edge/forwarding/answer-framing.ts). */
describe('ChunkedEnd', () => {
  const BODY = '5;ext=1\r\nhello\r\n10\r\n0123456789abcdef\r\n0\r\nX-Trailer: 1\r\n\r\n';

  it('finds the end after the last chunk and the trailer, fed whole or a byte at a time, with bytes after it', () => {
    expect(new ChunkedEnd().feed(Buffer.from(BODY + 'NEXT'))).toBe(BODY.length);
    const c = new ChunkedEnd();
    const ends = [...Buffer.from(BODY)].map((b) => c.feed(Buffer.from([b])));
    expect(ends.slice(0, -1).every((e) => e === undefined)).toBe(true);
    expect(ends.at(-1)).toBe(1);
  });

  it('a chunk whose data holds what looks like a last chunk does not end the body', () => {
    const inner = '7\r\n0\r\n\r\n\r\n\r\n';
    expect(new ChunkedEnd().feed(Buffer.from(inner))).toBeUndefined();
    expect(new ChunkedEnd().feed(Buffer.from(inner + '0\r\n\r\n'))).toBe(inner.length + 5);
  });

  it.each([
    ['a size that is not hex', 'zz\r\n'],
    ['data not followed by CRLF', '2\r\nabX\r\n'],
    ['a size line past 8 KiB', '1' + ' '.repeat(9000)],
  ])('%s: MALFORMED', (_what, bytes) => {
    expect(new ChunkedEnd().feed(Buffer.from(bytes))).toBe(MALFORMED);
  });
});

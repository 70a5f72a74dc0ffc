/**
 * WebSocket frames by hand (RFC 6455 §5.2), for a client that is no WebSocket library: an HTTP/2 stream
 * opened with extended CONNECT (RFC 8441) carries the frames as DATA.
 */

export const OPCODE = { TEXT: 0x1, BINARY: 0x2, PING: 0x9, PONG: 0xa } as const;

/** A client's frame: masked, FIN, payload < 126 bytes. */
export function maskedFrame(opcode: number, payload: Buffer): Buffer {
  const mask = Buffer.from([1, 2, 3, 4]);
  const out = Buffer.alloc(6 + payload.length);
  out[0] = 0x80 | opcode;
  out[1] = 0x80 | payload.length;
  mask.copy(out, 2);
  for (let i = 0; i < payload.length; i++) out[6 + i] = payload[i]! ^ mask[i % 4]!;
  return out;
}

/** A client's text frame. */
export function maskedText(text: string): Buffer {
  return maskedFrame(OPCODE.TEXT, Buffer.from(text));
}

export interface ServerFrames {
  /** The next data frame's payload (text or binary), as text. */
  next(): Promise<string>;
  /** The next frame of any kind. */
  nextFrame(): Promise<{ opcode: number; payload: Buffer }>;
  /** Bytes read off the stream so far. */
  readonly bytes: number;
}

/** Reads the server's unmasked frames (payload < 126 bytes) off a stream. */
export function serverFrames(stream: NodeJS.ReadableStream): ServerFrames {
  let buf = Buffer.alloc(0);
  let bytes = 0;
  const queue: { opcode: number; payload: Buffer }[] = [];
  const waiting: ((f: { opcode: number; payload: Buffer }) => void)[] = [];
  stream.on('data', (c: Buffer) => {
    bytes += c.length;
    buf = Buffer.concat([buf, c]);
    while (buf.length >= 2 && buf.length >= 2 + (buf[1]! & 0x7f)) {
      const n = buf[1]! & 0x7f;
      const f = { opcode: buf[0]! & 0x0f, payload: buf.subarray(2, 2 + n) };
      buf = buf.subarray(2 + n);
      const w = waiting.shift();
      if (w !== undefined) w(f);
      else queue.push(f);
    }
  });
  const nextFrame = (): Promise<{ opcode: number; payload: Buffer }> => (queue.length > 0 ? Promise.resolve(queue.shift()!) : new Promise((r) => waiting.push(r)));
  return {
    nextFrame,
    next: async () => {
      for (;;) {
        const f = await nextFrame();
        if (f.opcode === OPCODE.TEXT || f.opcode === OPCODE.BINARY) return f.payload.toString();
      }
    },
    get bytes() {
      return bytes;
    },
  };
}

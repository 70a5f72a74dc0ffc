import { connect, type Socket } from 'node:net';

/**
 * A raw HTTP/2 peer for tests that must break rules node:http2's client keeps: more streams than the
 * server's SETTINGS_MAX_CONCURRENT_STREAMS (nghttp2's client queues them instead), SETTINGS never
 * acknowledged, a preface never finished. It writes frames itself (RFC 9113 §4, header blocks as HPACK
 * literals without indexing, RFC 7541 §6.2.2) and parses the frames the server sends.
 */

export const FRAME = { DATA: 0, HEADERS: 1, RST_STREAM: 3, SETTINGS: 4, PING: 6, GOAWAY: 7, WINDOW_UPDATE: 8 } as const;
const END_STREAM = 0x1;
const END_HEADERS = 0x4;

export const PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

export interface Frame {
  readonly type: number;
  readonly flags: number;
  readonly stream: number;
  readonly payload: Buffer;
}

export function frame(type: number, flags: number, stream: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(stream, 5);
  return Buffer.concat([head, payload]);
}

/** A header block of literal fields without indexing, new names (no Huffman; names and values < 127 bytes). */
function headerBlock(headers: Record<string, string>): Buffer {
  const parts: Buffer[] = [];
  for (const [k, v] of Object.entries(headers)) {
    parts.push(Buffer.from([0x00, k.length]), Buffer.from(k, 'latin1'), Buffer.from([v.length]), Buffer.from(v, 'latin1'));
  }
  return Buffer.concat(parts);
}

/** A HEADERS frame opening a gRPC call on `stream` (odd ids, increasing), without END_STREAM. */
export function grpcHeaders(stream: number, path: string): Buffer {
  const block = headerBlock({ ':method': 'POST', ':scheme': 'http', ':path': path, ':authority': 'x', 'content-type': 'application/grpc', te: 'trailers' });
  return frame(FRAME.HEADERS, END_HEADERS, stream, block);
}

export function data(stream: number, payload: Buffer, end = false): Buffer {
  return frame(FRAME.DATA, end ? END_STREAM : 0, stream, payload);
}

export function goaway(lastStream = 0, code = 0): Buffer {
  const p = Buffer.alloc(8);
  p.writeUInt32BE(lastStream, 0);
  p.writeUInt32BE(code, 4);
  return frame(FRAME.GOAWAY, 0, 0, p);
}

export interface RawH2 {
  readonly socket: Socket;
  /** Every frame the server sent so far. */
  readonly frames: Frame[];
  /** True once the server closed (or reset) the connection. */
  readonly closed: boolean;
  write(bytes: Buffer): void;
  /** The RST_STREAM error codes the server sent, by stream id. */
  resets(): Map<number, number>;
  destroy(): void;
}

/** Connects; sends the preface and an empty SETTINGS unless `handshake` is false. It never ACKs the server's SETTINGS. */
export async function rawH2(port: number, handshake = true): Promise<RawH2> {
  const socket = connect(port, '127.0.0.1');
  socket.setNoDelay(true);
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  const frames: Frame[] = [];
  let buf: Buffer = Buffer.alloc(0);
  let closed = false;
  socket.on('error', () => {});
  socket.on('close', () => (closed = true));
  socket.on('data', (d: Buffer) => {
    buf = buf.length === 0 ? d : Buffer.concat([buf, d]);
    while (buf.length >= 9) {
      const n = buf.readUIntBE(0, 3);
      if (buf.length < 9 + n) break;
      frames.push({ type: buf[3]!, flags: buf[4]!, stream: buf.readUInt32BE(5) & 0x7fff_ffff, payload: buf.subarray(9, 9 + n) });
      buf = buf.subarray(9 + n);
    }
  });
  if (handshake) socket.write(Buffer.concat([PREFACE, frame(FRAME.SETTINGS, 0, 0)]));
  return {
    socket,
    frames,
    get closed() {
      return closed;
    },
    write: (bytes) => void socket.write(bytes),
    resets() {
      const out = new Map<number, number>();
      for (const f of frames) if (f.type === FRAME.RST_STREAM) out.set(f.stream, f.payload.readUInt32BE(0));
      return out;
    },
    destroy: () => socket.destroy(),
  };
}

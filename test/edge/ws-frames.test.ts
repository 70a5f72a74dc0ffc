import { describe, expect, it } from 'vitest';
import * as wsModule from 'ws';
import { FrameScanner } from '../../src/edge/forwarding/ws-frames.js';
import { prng } from '../helpers/prng.js';

import type { Writable } from 'node:stream';

/** ws's framing classes: exported by the package, absent from @types/ws. */
const { Receiver, Sender } = wsModule as unknown as {
  Receiver: new (o: { isServer: boolean; maxPayload: number }) => Writable;
  Sender: { frame(data: Buffer, o: { fin: boolean; opcode: number; mask: boolean; readOnly: boolean; rsv1: boolean }): Buffer[] };
};

/** ws's own framing (Sender.frame) of one frame. */
function frame(opcode: number, payload: Buffer, mask: boolean, fin = true): Buffer {
  return Buffer.concat(Sender.frame(payload, { fin, opcode, mask, readOnly: false, rsv1: false }));
}

/** What ws's Receiver (the library the scanner stands beside) reads from `bytes`, fed in `cuts`. */
function received(bytes: Buffer, isServer: boolean, cuts: number[]): { messages: number; pings: number; pongs: number } {
  const r = new Receiver({ isServer, maxPayload: 1 << 24 });
  const out = { messages: 0, pings: 0, pongs: 0 };
  r.on('message', () => out.messages++);
  r.on('ping', () => out.pings++);
  r.on('pong', () => out.pongs++);
  let at = 0;
  for (const c of [...cuts, bytes.length]) {
    r.write(bytes.subarray(at, c));
    at = c;
  }
  return out;
}

describe('FrameScanner against ws', () => {
  it('counts the same data and control frames as ws reads, whatever the chunking (500 random streams)', () => {
    for (let seed = 1; seed <= 500; seed++) {
      const rnd = prng(seed);
      const masked = rnd() < 0.5;
      const parts: Buffer[] = [];
      let data = 0;
      let control = 0;
      let messages = 0;
      const n = 1 + Math.floor(rnd() * 8);
      for (let i = 0; i < n; i++) {
        const kind = rnd();
        const size = [0, 1, 125, 126, 200, 65535, 65536, 70000][Math.floor(rnd() * 8)]!;
        if (kind < 0.3) {
          parts.push(frame(0x9, Buffer.alloc(Math.min(size, 125), 1), masked));
          control++;
        } else if (kind < 0.45) {
          parts.push(frame(0xa, Buffer.alloc(Math.min(size, 125), 2), masked));
          control++;
        } else if (kind < 0.6) {
          // A fragmented message: two data frames, a ping between them.
          parts.push(frame(0x2, Buffer.alloc(size, 3), masked, false), frame(0x9, Buffer.alloc(3), masked), frame(0x0, Buffer.alloc(5, 4), masked, true));
          data += 2;
          control++;
          messages++;
        } else {
          parts.push(frame(rnd() < 0.5 ? 0x1 : 0x2, Buffer.alloc(size, 0x61), masked));
          data++;
          messages++;
        }
      }
      const bytes = Buffer.concat(parts);
      const cuts = Array.from({ length: Math.floor(rnd() * 6) }, () => Math.floor(rnd() * bytes.length)).sort((a, b) => a - b);
      const ws = received(bytes, masked, cuts);
      expect(ws, `seed ${seed}`).toEqual({ messages, pings: ws.pings, pongs: ws.pongs });
      expect(ws.pings + ws.pongs, `seed ${seed}`).toBe(control);
      const s = new FrameScanner();
      let at = 0;
      let sawData = false;
      for (const c of [...cuts, bytes.length]) {
        sawData = s.feed(bytes.subarray(at, c)) || sawData;
        at = c;
      }
      expect({ data: s.dataFrames, control: s.controlFrames, broken: s.broken }, `seed ${seed}`).toEqual({ data, control, broken: false });
      expect(sawData, `seed ${seed}`).toBe(data > 0);
    }
  });

  it('says no data for a chunk of pings alone, yes for a chunk holding any data frame byte', () => {
    const s = new FrameScanner();
    expect(s.feed(Buffer.concat([frame(0x9, Buffer.from('a'), true), frame(0xa, Buffer.from('b'), true)]))).toBe(false);
    const text = frame(0x1, Buffer.alloc(1000, 0x61), true);
    // Until its head is whole a frame is neither; its payload bytes then count in any chunk.
    expect(s.feed(text.subarray(0, 3))).toBe(false);
    expect(s.feed(text.subarray(3, 10))).toBe(true);
    expect(s.feed(text.subarray(10))).toBe(true);
    expect(s.feed(frame(0x9, Buffer.alloc(0), true))).toBe(false);
  });

  it.each([
    ['a ping longer than 125 bytes', Buffer.from([0x89, 0x7e, 0x00, 0x80])],
    ['a fragmented ping', Buffer.from([0x09, 0x00])],
    ['a 64-bit length with its top bit set', Buffer.from([0x82, 0x7f, 0x80, 0, 0, 0, 0, 0, 0, 1])],
    ['a reserved opcode', Buffer.from([0x83, 0x00])],
    ['bytes of another protocol', Buffer.from('HTTP/1.1 200 OK\r\n', 'latin1')],
  ])('counts everything as data after %s (framing it does not follow)', (_what, bytes) => {
    const s = new FrameScanner();
    expect(s.feed(bytes)).toBe(true);
    expect(s.broken).toBe(true);
    expect(s.feed(frame(0x9, Buffer.alloc(0), true))).toBe(true);
  });
});

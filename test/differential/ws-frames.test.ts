import type { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import * as wsModule from 'ws';
import { FrameScanner } from '../../src/edge/forwarding/ws-frames.js';
import { fuzzPlan } from '../helpers/fuzz.js';

/**
 * The WebSocket frame scanner (src/edge/forwarding/ws-frames.ts) against ws's Receiver, the library it
 * stands beside. Generated streams of frames — data, fragments, pings and pongs of every length class,
 * masked or not — cut at random points, and the same streams with one byte replaced. Where ws reads a
 * stream to its end, the scanner counts the same control frames, at least as many data frames as ws has
 * messages, and is never broken; where the scanner calls a stream broken, ws refused it too.
 */

const plan = fuzzPlan(300, 0x3f5a11);
const r = plan.random;
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;

/** ws's framing classes: exported by the package, absent from @types/ws. */
const { Receiver, Sender } = wsModule as unknown as {
  Receiver: new (o: { isServer: boolean; maxPayload: number }) => Writable;
  Sender: { frame(data: Buffer, o: { fin: boolean; opcode: number; mask: boolean; readOnly: boolean; rsv1: boolean }): Buffer[] };
};

function frame(opcode: number, payload: Buffer, mask: boolean, fin = true): Buffer {
  return Buffer.concat(Sender.frame(payload, { fin, opcode, mask, readOnly: false, rsv1: false }));
}

/** A ping ending every stream: ws emitting it shows that ws read the stream to a frame boundary. */
const SENTINEL = Buffer.from('end-of-stream');

interface Generated {
  readonly bytes: Buffer;
  readonly masked: boolean;
  readonly data: number;
  readonly control: number;
}

/** A stream of 1-8 frame groups, then the sentinel ping. */
function stream(): Generated {
  const masked = r() < 0.5;
  const parts: Buffer[] = [];
  let data = 0;
  let control = 0;
  const n = 1 + Math.floor(r() * 8);
  for (let i = 0; i < n; i++) {
    const kind = r();
    const size = pick([0, 1, 2, 125, 126, 127, 200, 65535, 65536, 70000]);
    if (kind < 0.3) {
      parts.push(frame(pick([0x9, 0xa]), Buffer.alloc(Math.min(size, 125), 1), masked));
      control++;
    } else if (kind < 0.5) {
      // A fragmented message, a control frame between its fragments.
      const fragments = 2 + Math.floor(r() * 3);
      for (let k = 0; k < fragments; k++) {
        parts.push(frame(k === 0 ? pick([0x1, 0x2]) : 0x0, Buffer.alloc(k === 0 ? size : Math.floor(r() * 300), 0x62), masked, k === fragments - 1));
        data++;
        if (k === 0) {
          parts.push(frame(0x9, Buffer.alloc(3), masked));
          control++;
        }
      }
    } else {
      parts.push(frame(pick([0x1, 0x2]), Buffer.alloc(size, 0x61), masked));
      data++;
    }
  }
  // A copy: ws masks a payload it may write to in place.
  parts.push(frame(0x9, Buffer.from(SENTINEL), masked));
  control++;
  return { bytes: Buffer.concat(parts), masked, data, control };
}

/** Random cut points in `length` bytes, in order. */
function cuts(length: number): number[] {
  return Array.from({ length: Math.floor(r() * 6) }, () => Math.floor(r() * length)).sort((a, b) => a - b);
}

/** What ws reads from `bytes` (as the server when masked), fed in pieces at `at`. */
function viaWs(bytes: Buffer, masked: boolean, at: readonly number[]): { messages: number; control: number; sentinel: boolean; error: string | undefined } {
  const rec = new Receiver({ isServer: masked, maxPayload: 1 << 24 });
  const out = { messages: 0, control: 0, sentinel: false, error: undefined as string | undefined };
  rec.on('message', () => out.messages++);
  const onControl = (payload: Buffer): void => {
    out.control++;
    if (payload.equals(SENTINEL)) out.sentinel = true;
  };
  rec.on('ping', onControl);
  rec.on('pong', onControl);
  rec.on('error', () => undefined);
  let from = 0;
  for (const c of [...at, bytes.length]) {
    if (rec.errored !== null) break;
    rec.write(bytes.subarray(from, c));
    from = c;
  }
  out.error = (rec.errored as (Error & { code?: string }) | null)?.code;
  return out;
}

function viaScanner(bytes: Buffer, at: readonly number[]): { data: number; control: number; broken: boolean; sawData: boolean } {
  const s = new FrameScanner();
  let sawData = false;
  let from = 0;
  for (const c of [...at, bytes.length]) {
    sawData = s.feed(bytes.subarray(from, c)) || sawData;
    from = c;
  }
  return { data: s.dataFrames, control: s.controlFrames, broken: s.broken, sawData };
}

describe(`FrameScanner against ws's Receiver (seed ${plan.seed}, ${plan.runs} streams per test)`, () => {
  it('well-formed streams, cut anywhere: the same frames as ws reads', () => {
    for (let run = 0; run < plan.runs; run++) {
      const g = stream();
      const at = cuts(g.bytes.length);
      const ws = viaWs(g.bytes, g.masked, at);
      const why = `seed ${plan.seed}, run ${run}`;
      expect([ws.error, ws.sentinel, ws.control], why).toEqual([undefined, true, g.control]);
      expect(viaScanner(g.bytes, at), why).toEqual({ data: g.data, control: g.control, broken: false, sawData: g.data > 0 });
    }
  });

  it('one byte replaced (most often in a frame head): the scanner breaks only on what ws refuses, and counts as ws where ws reads on', () => {
    for (let run = 0; run < plan.runs; run++) {
      const g = stream();
      const bytes = Buffer.from(g.bytes);
      // A head byte most of the time (the first bytes of the stream, or any of the sentinel's), else any.
      const where = r();
      const i = where < 0.4 ? Math.floor(r() * Math.min(14, bytes.length)) : where < 0.6 ? bytes.length - 2 - SENTINEL.length - (g.masked ? 4 : 0) + Math.floor(r() * 2) : Math.floor(r() * bytes.length);
      bytes[i] = Math.floor(r() * 256);
      const at = cuts(bytes.length);
      const ws = viaWs(bytes, g.masked, at);
      const s = viaScanner(bytes, at);
      const why = `seed ${plan.seed}, run ${run}: byte ${i} of ${bytes.length} now 0x${bytes[i]!.toString(16)}; ws ${JSON.stringify(ws)}; scanner ${JSON.stringify(s)}`;
      if (s.broken) expect(ws.error, why).toBeDefined();
      if (ws.error === undefined && ws.sentinel) {
        expect(s.broken, why).toBe(false);
        expect(s.control, why).toBe(ws.control);
        expect(s.data, why).toBeGreaterThanOrEqual(ws.messages);
        if (ws.messages > 0) expect(s.sawData, why).toBe(true);
      }
    }
  });
});

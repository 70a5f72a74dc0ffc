import { describe, expect, it } from 'vitest';
import {
  decodeFrame,
  encodeClose,
  encodeData,
  encodeOpen,
  encodeOpenFail,
  encodeOpenOk,
  encodeReset,
  encodeWindow,
  FRAME,
  isRelayFrameError,
  OPEN_FAIL,
  RESET,
} from '../../src/sessions/relay-frames.js';
import { CLOSE } from '../../src/sessions/supervisor-protocol.js';

const raw = (...bytes: number[]) => Buffer.from(bytes);

describe('relay frames', () => {
  it('round-trips every frame type', () => {
    const data = Buffer.from('hello, sandbox');
    expect(decodeFrame(encodeOpen(1, 8080, 262_144))).toEqual({ type: 'open', id: 1, port: 8080, window: 262_144 });
    expect(decodeFrame(encodeOpenOk(7, 65_536))).toEqual({ type: 'open_ok', id: 7, window: 65_536 });
    expect(decodeFrame(encodeOpenFail(7, OPEN_FAIL.refused))).toEqual({ type: 'open_fail', id: 7, reason: OPEN_FAIL.refused });
    const d = decodeFrame(encodeData(0xffffffff, data));
    expect(d).toMatchObject({ type: 'data', id: 0xffffffff });
    expect(Buffer.compare((d as { data: Buffer }).data, data)).toBe(0);
    expect(decodeFrame(encodeWindow(3, 1))).toEqual({ type: 'window', id: 3, increment: 1 });
    expect(decodeFrame(encodeClose(3))).toEqual({ type: 'close', id: 3 });
    expect(decodeFrame(encodeReset(3, RESET.flowControl))).toEqual({ type: 'reset', id: 3, reason: RESET.flowControl });
  });

  it('lays frames out as [type u8][stream id u32 BE][payload]; OPEN names a port and nothing else', () => {
    expect([...encodeOpen(0x01020304, 443, 5)]).toEqual([FRAME.open, 1, 2, 3, 4, 0x01, 0xbb, 0, 0, 0, 5]);
    expect([...encodeWindow(1, 0x10000)]).toEqual([FRAME.window, 0, 0, 0, 1, 0, 1, 0, 0]);
  });

  it('reads an unknown OPEN_FAIL or RESET reason from a newer peer as the generic one', () => {
    expect(decodeFrame(raw(FRAME.openFail, 0, 0, 0, 1, 99))).toEqual({ type: 'open_fail', id: 1, reason: OPEN_FAIL.error });
    expect(decodeFrame(raw(FRAME.reset, 0, 0, 0, 1, 99))).toEqual({ type: 'reset', id: 1, reason: RESET.aborted });
  });

  const hostile: [string, Buffer, number][] = [
    ['empty', raw(), CLOSE.malformed],
    ['shorter than the header', raw(FRAME.data, 0, 0, 1), CLOSE.malformed],
    ['stream id 0', raw(FRAME.close, 0, 0, 0, 0), CLOSE.malformed],
    ['OPEN without a window', raw(FRAME.open, 0, 0, 0, 1, 0, 80), CLOSE.malformed],
    ['OPEN to port 0', encodeOpen(1, 0, 10), CLOSE.malformed],
    ['OPEN with window 0', encodeOpen(1, 80, 0), CLOSE.malformed],
    ['OPEN with a window past 2^31', encodeOpen(1, 80, 0x80000000), CLOSE.malformed],
    ['OPEN with trailing bytes', Buffer.concat([encodeOpen(1, 80, 10), raw(0)]), CLOSE.malformed],
    ['OPEN_OK with window 0', encodeOpenOk(1, 0), CLOSE.malformed],
    ['empty DATA', raw(FRAME.data, 0, 0, 0, 1), CLOSE.malformed],
    ['WINDOW of 0', encodeWindow(1, 0), CLOSE.malformed],
    ['WINDOW too short', raw(FRAME.window, 0, 0, 0, 1, 0, 1), CLOSE.malformed],
    ['CLOSE with a payload', raw(FRAME.close, 0, 0, 0, 1, 0), CLOSE.malformed],
    ['RESET without a reason', raw(FRAME.reset, 0, 0, 0, 1), CLOSE.malformed],
    ['unknown type', raw(0x42, 0, 0, 0, 1), CLOSE.unexpected],
    ['type 0', raw(0, 0, 0, 0, 1), CLOSE.unexpected],
  ];
  it.each(hostile)('refuses %s without throwing', (_name, frame, close) => {
    const r = decodeFrame(frame);
    expect(isRelayFrameError(r)).toBe(true);
    expect(r).toMatchObject({ close });
  });
});

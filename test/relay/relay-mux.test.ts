import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { encodeData, encodeOpen, encodeOpenOk, encodeWindow, FRAME, OPEN_FAIL, type RelayFrameError } from '../../src/sessions/relay-frames.js';
import { RelayMux, type RelayTransport } from '../../src/sessions/relay-mux.js';
import { RelayError, type RelayStream } from '../../src/sessions/relay-stream.js';
import { LimitedRelayOpener } from '../../src/sessions/relay-opener.js';
import { CLOSE } from '../../src/sessions/supervisor-protocol.js';
import { patternStream, sha256Of } from '../helpers/upstream.js';
import { eventually } from '../helpers/eventually.js';

// Two multiplexers joined by an in-memory wire: each frame is delivered on a later turn of the event
// loop, and `done` (the WebSocket's "written") fires after delivery — or only on release() while held.

const WINDOW = 64 * 1024;
const CHUNK = 16 * 1024;
const MiB = 1024 * 1024;

interface Wire extends RelayTransport {
  hold: boolean;
  sent: Buffer[];
  release(): void;
}

function wire(to: () => RelayMux, errors: RelayFrameError[]): Wire {
  const held: (() => void)[] = [];
  const w: Wire = {
    hold: false,
    sent: [],
    send(frame, done) {
      w.sent.push(frame);
      const deliver = (): void => {
        setImmediate(() => {
          const e = to().receive(frame);
          if (e !== undefined) errors.push(e);
          done();
        });
      };
      if (w.hold) held.push(deliver);
      else deliver();
    },
    release() {
      w.hold = false;
      for (const d of held.splice(0)) d();
    },
  };
  return w;
}

function pair(onOpen: (s: RelayStream) => void = (s) => s.accept(), highWaterBytes = 4 * MiB) {
  const errors: RelayFrameError[] = [];
  const box: { gw?: RelayMux; sup?: RelayMux } = {};
  const up = wire(() => box.sup!, errors);
  const down = wire(() => box.gw!, errors);
  const gw = new RelayMux({ role: 'gateway', transport: up, windowBytes: WINDOW, maxChunkBytes: CHUNK, highWaterBytes });
  const sup = new RelayMux({ role: 'supervisor', transport: down, windowBytes: WINDOW, maxChunkBytes: CHUNK, highWaterBytes, onOpen });
  box.gw = gw;
  box.sup = sup;
  const streams = new LimitedRelayOpener((ns) => (ns === 'ns' ? gw : undefined), { maxStreamsPerSandbox: 4, maxStreamsPerNamespace: 8, maxStreams: 8, openTimeoutMs: 200 });
  return { gw, sup, up, down, errors, streams };
}

const types = (frames: Buffer[]) => frames.map((f) => f[0]);

/** Writes `total` pattern bytes into `s`, honouring backpressure, then ends it. */
async function pump(s: RelayStream, total: number): Promise<void> {
  for await (const c of patternStream(total)) {
    if (!s.write(c)) await new Promise((r) => s.once('drain', r));
  }
  s.end();
}

describe('relay multiplexer', () => {
  it('opens a stream, carries bytes both ways, half-closes each way and forgets it on both ends', async () => {
    let far: RelayStream | undefined;
    const { gw, sup, up, down, streams } = pair((s) => {
      far = s;
      s.accept();
      s.on('data', (c: Buffer) => s.write(Buffer.from(c.toString().toUpperCase())));
      s.on('end', () => s.end());
    });
    const s = await streams.openRelayStream('ns', 'sb', 8080);
    expect(far?.port).toBe(8080);
    s.end('hello relay');
    expect((await s.toArray()).join('')).toBe('HELLO RELAY');
    await eventually(() => gw.size === 0 && sup.size === 0, 5000, 'both tables empty');
    expect(streams.active).toBe(0);
    expect(types(up.sent)).not.toContain(FRAME.reset);
    expect(types(down.sent)).not.toContain(FRAME.reset);
  });

  it('maps OPEN_FAIL reasons to RelayError reasons', async () => {
    const reasons = [OPEN_FAIL.refused, OPEN_FAIL.timeout, OPEN_FAIL.notAllowed, OPEN_FAIL.busy, OPEN_FAIL.error];
    let i = 0;
    const { streams } = pair((s) => s.refuse(reasons[i++]!));
    const got: string[] = [];
    for (let n = 0; n < reasons.length; n++) got.push(await streams.openRelayStream('ns', 'sb', 80).then(() => 'opened', (e: RelayError) => e.reason));
    expect(got).toEqual(['refused', 'timeout', 'not_allowed', 'busy', 'failed']);
    expect(streams.active).toBe(0);
  });

  it('a reader that stops stalls the writer after one window: memory stays bounded on both ends', async () => {
    let far: RelayStream | undefined;
    const { gw, sup, streams } = pair((s) => {
      far = s;
      s.accept();
    });
    const near = await streams.openRelayStream('ns', 'sb', 80);
    const total = 8 * MiB;
    const writing = pump(far!, total);
    await eventually(() => far!.blockedOnCredit, 5000, 'the writer to run out of credit');
    // Frames already sent may still be in flight between the ends: wait for them to land.
    await eventually(() => near.bufferedBytes === WINDOW, 5000, 'the last frames of the window to arrive');
    // Nothing was read: exactly one window waits on the reading side, the writer is still stalled, and
    // it holds at most its stream buffer (16 KiB high-water mark) plus the chunk in hand.
    expect(far!.blockedOnCredit).toBe(true);
    expect(gw.bufferedBytes()).toBe(WINDOW);
    expect(sup.bufferedBytes()).toBeLessThanOrEqual(16 * 1024 + 64 * 1024);
    const [got] = await Promise.all([sha256Of(near), writing]);
    expect(got).toEqual(await sha256Of(patternStream(total)));
    expect(far!.creditStalls).toBeGreaterThan(0);
  });

  it('pauses every stream while the WebSocket holds more than its high-water mark', async () => {
    // Below one stream's window, so the socket's mark (not credit) is what stops the sender.
    const high = 24 * 1024;
    let far: RelayStream | undefined;
    const { gw, up, streams } = pair((s) => {
      far = s;
      s.accept();
    }, high);
    const near = await streams.openRelayStream('ns', 'sb', 80);
    const got = sha256Of(far!);
    up.hold = true;
    const writing = pump(near, 2 * MiB);
    await eventually(() => gw.wsPendingBytes >= high, 5000, 'the socket buffer to fill');
    await new Promise((r) => setImmediate(r));
    // Sending stopped at the mark (give or take the frame that crossed it).
    expect(gw.wsPendingBytes).toBeLessThan(high + CHUNK + 5);
    up.release();
    await writing;
    expect((await got).bytes).toBe(2 * MiB);
  });

  it('a RESET aborts the stream on the other end; destroying an open stream sends one', async () => {
    let far: RelayStream | undefined;
    const { streams } = pair((s) => {
      far = s;
      s.accept();
    });
    const near = await streams.openRelayStream('ns', 'sb', 80);
    const err = new Promise<Error>((resolve) => far!.once('error', resolve));
    near.destroy();
    expect(await err).toMatchObject({ reason: 'reset' });
    await eventually(() => streams.active === 0, 5000, 'the stream to be released');
  });

  it('the session ending fails every stream with session_closed and frees its place under the caps', async () => {
    const { gw, streams } = pair();
    const a = await streams.openRelayStream('ns', 'sb', 80);
    const b = await streams.openRelayStream('ns', 'sb', 81);
    const errs = Promise.all([a, b].map((s) => new Promise<Error>((r) => s.once('error', r))));
    gw.close();
    expect((await errs).map((e) => (e as RelayError).reason)).toEqual(['session_closed', 'session_closed']);
    await eventually(() => streams.active === 0, 5000, 'the caps to be released');
    await expect(streams.openRelayStream('ns', 'sb', 80)).rejects.toMatchObject({ reason: 'no_session' });
  });

  it('caps streams per sandbox and overall, counting streams still opening', async () => {
    const { streams } = pair(() => {});
    const pending = Array.from({ length: 4 }, () => streams.openRelayStream('ns', 'sb', 80));
    await expect(streams.openRelayStream('ns', 'sb', 80)).rejects.toMatchObject({ reason: 'busy' });
    expect(streams.activeFor('ns', 'sb')).toBe(4);
    // Never answered: each open times out, and its place is freed.
    for (const p of pending) await expect(p).rejects.toMatchObject({ reason: 'timeout' });
    await eventually(() => streams.active === 0, 5000, 'timed-out opens to be released');
  });

  it('an open cancelled by the caller is reset, and a late OPEN_OK for it is answered with RESET', async () => {
    let far: RelayStream | undefined;
    const { gw, up, down, streams } = pair((s) => (far = s));
    const ac = new AbortController();
    const p = streams.openRelayStream('ns', 'sb', 80, ac.signal);
    await eventually(() => far !== undefined, 5000, 'the OPEN to arrive');
    ac.abort();
    await expect(p).rejects.toMatchObject({ reason: 'aborted' });
    await eventually(() => far!.destroyed, 5000, 'the supervisor side to see the RESET');
    expect(types(up.sent)).toEqual([FRAME.open, FRAME.reset]);
    expect(types(down.sent)).toEqual([]);
    // The supervisor had already connected and said so: the gateway resets the stream it gave up on.
    expect(gw.receive(encodeOpenOk(far!.id, WINDOW))).toBeUndefined();
    expect(types(up.sent)).toEqual([FRAME.open, FRAME.reset, FRAME.reset]);
  });

  it('DATA beyond the window resets that stream only', async () => {
    const { gw, sup, errors, streams } = pair();
    const near = await streams.openRelayStream('ns', 'sb', 80);
    const err = new Promise<Error>((r) => near.once('error', r));
    expect(gw.receive(encodeData(near.id, Buffer.alloc(WINDOW + 1)))).toBeUndefined();
    expect(await err).toMatchObject({ reason: 'reset' });
    expect(errors).toEqual([]);
    expect(gw.closed || sup.closed).toBe(false);
  });

  const violations: [string, 'gateway' | 'supervisor', (m: RelayMux) => RelayFrameError | undefined, number][] = [
    ['a supervisor opening a stream', 'gateway', (m) => m.receive(encodeOpen(1, 80, WINDOW)), CLOSE.unexpected],
    ['OPEN_OK sent to a supervisor', 'supervisor', (m) => m.receive(encodeOpenOk(1, WINDOW)), CLOSE.unexpected],
    ['a frame for a stream never opened', 'gateway', (m) => m.receive(encodeWindow(9, 1)), CLOSE.malformed],
    ['stream ids that do not grow', 'supervisor', (m) => (m.receive(encodeOpen(5, 80, WINDOW)) ?? m.receive(encodeOpen(5, 80, WINDOW))), CLOSE.malformed],
    ['a malformed frame', 'gateway', (m) => m.receive(Buffer.from([FRAME.data, 0, 0])), CLOSE.malformed],
  ];
  it.each(violations)('closes the session for %s', (_name, role, act, close) => {
    const m = new RelayMux({ role, transport: { send: (_f, done) => done() }, windowBytes: WINDOW, maxChunkBytes: CHUNK, highWaterBytes: MiB, onOpen: (s) => s.accept() });
    expect(act(m)).toMatchObject({ close });
  });

  it('sends at most the peer frame limit per DATA frame', async () => {
    let far: RelayStream | undefined;
    const { up, streams } = pair((s) => {
      far = s;
      s.accept();
    });
    const near = await streams.openRelayStream('ns', 'sb', 80);
    const got = sha256Of(far!);
    near.end(Buffer.alloc(100_000, 1));
    expect((await got).bytes).toBe(100_000);
    const data = up.sent.filter((f) => f[0] === FRAME.data);
    expect(Math.max(...data.map((f) => f.length - 5))).toBe(CHUNK);
    expect(createHash('sha256').update(Buffer.concat(data.map((f) => f.subarray(5)))).digest('hex')).toBe(createHash('sha256').update(Buffer.alloc(100_000, 1)).digest('hex'));
  });
});

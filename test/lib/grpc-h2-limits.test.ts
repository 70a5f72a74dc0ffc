import { execFileSync } from 'node:child_process';
import { mkdtempSync, open as openFile, openSync, closeSync } from 'node:fs';
import { connect, constants, type ClientHttp2Session } from 'node:http2';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { afterEach, describe, expect, it } from 'vitest';
import { GrpcH2Server, GrpcStatus, type GrpcServerLimits, type ServerCall } from '../../src/lib/grpc-h2-server.js';
import { eventually, nextEvent } from '../helpers/eventually.js';
import { CHECK, CHECK_PATH, checkRequest, frame, messageOf, messages, open, PROCESS, PROCESS_PATH, processRequest, reply, statusOf } from '../helpers/grpc-wire.js';
import { data, grpcHeaders, rawH2, type RawH2 } from '../helpers/raw-h2.js';

/**
 * What one gRPC connection may cost the server (lib/grpc-h2-server.ts): its streams, the request bytes it
 * makes the server hold, answers it does not read, compressed messages it sends — each bounded, with a
 * typed refusal where there is one.
 */

const MIB = 1024 * 1024;

// Torn down after each test as in grpc-h2-connection.test.ts: the tests assign `server` and push their
// clients directly, which a shared holder would only rename.
let server: GrpcH2Server | undefined;
const clients: { destroy(): void }[] = [];

afterEach(async () => {
  for (const c of clients.splice(0)) c.destroy();
  await server?.close(50);
  server = undefined;
});

/** A server whose Check holds calls for host "hold" and answers the rest; Process echoes each message's kind. */
async function start(limits: Partial<GrpcServerLimits> = {}): Promise<{ port: number; held: ServerCall<unknown, unknown>[]; seen: { messages: number } }> {
  const held: ServerCall<unknown, unknown>[] = [];
  const seen = { messages: 0 };
  server = new GrpcH2Server({ onHandlerError: () => {}, limits });
  server.addUnary(CHECK, (call) => {
    const host = (call.request as { attributes?: { request?: { http?: { host?: string } } } }).attributes?.request?.http?.host;
    if (host === 'hold') held.push(call as ServerCall<unknown, unknown>);
    else call.end({ status: { code: 0, message: host } });
  });
  server.addBidi(PROCESS, (call) => ({
    message: (m: { request?: string }) => {
      seen.messages++;
      call.write({ [m.request ?? 'request_body']: {} });
    },
    halfClose: () => call.end(),
  }));
  return { port: await server.listen('127.0.0.1', 0), held, seen };
}

function client(port: number, settings: Parameters<typeof connect>[1] = {}): ClientHttp2Session {
  const session = connect(`http://127.0.0.1:${port}`, settings);
  session.on('error', () => {});
  clients.push(session);
  return session;
}

async function raw(port: number, handshake = true): Promise<RawH2> {
  const r = await rawH2(port, handshake);
  clients.push(r);
  return r;
}

/** A gRPC message prefix announcing `length` bytes, and `have` of them. */
function partial(length: number, have: number): Buffer {
  const out = Buffer.alloc(5 + have);
  out.writeUInt32BE(length, 1);
  return out;
}

describe('concurrent streams per connection', () => {
  it('advertises SETTINGS_MAX_CONCURRENT_STREAMS 100 by default (as Envoy and grpc-go)', async () => {
    const { port } = await start();
    const session = client(port);
    await nextEvent(session, 'remoteSettings');
    expect(session.remoteSettings.maxConcurrentStreams).toBe(100);
  });

  it('a peer opening more streams than the bound gets RST_STREAM REFUSED_STREAM for each one past it', async () => {
    const { port, held } = await start({ maxConcurrentStreams: 5 });
    const r = await raw(port);
    // Eight calls held open by the handler (no half-close): 1, 3, …, 15.
    const ids = Array.from({ length: 8 }, (_, i) => 2 * i + 1);
    r.write(Buffer.concat(ids.flatMap((id) => [grpcHeaders(id, CHECK_PATH), data(id, frame(checkRequest('hold')))])));
    await eventually(() => r.resets().size === 3, 5000, () => `three resets, saw ${JSON.stringify([...r.resets()])}`);
    expect([...r.resets()]).toEqual([11, 13, 15].map((id) => [id, constants.NGHTTP2_REFUSED_STREAM]));
    expect(r.closed).toBe(false);
    // A stream within the bound still reaches its handler once its message is complete.
    r.write(data(1, Buffer.alloc(0), true));
    await eventually(() => held.length === 1, 5000, 'the first call to reach the handler');
  });
});

describe('request bytes held per stream and per connection', () => {
  it('a message still arriving is held at its announced length: past the connection bound, RESOURCE_EXHAUSTED before it is buffered', async () => {
    const { port } = await start({ maxConnectionBufferBytes: 3 * MIB, maxStreamBufferBytes: 2 * MIB });
    const session = client(port);
    // Four calls each announce a 1 MiB message and send half of it: two fit in 3 MiB, two do not.
    const streams = Array.from({ length: 4 }, () => open(session, CHECK_PATH));
    const replies = streams.map((s) => reply(s));
    for (const s of streams) s.write(partial(MIB, MIB / 2));
    const refused = await Promise.all(replies.slice(2));
    for (const r of refused) {
      expect(statusOf(r)).toBe(GrpcStatus.RESOURCE_EXHAUSTED);
      expect(messageOf(r)).toContain('buffer limit');
    }
    // A held call that ends gives its bytes back: a new one fits again.
    streams[0]!.close(constants.NGHTTP2_CANCEL);
    await replies[0];
    const next = open(session, CHECK_PATH);
    const answered = reply(next);
    next.end(frame(checkRequest('after')));
    expect(statusOf(await answered)).toBe(GrpcStatus.OK);
  });

  it('a message larger than the stream bound is refused on its prefix with RESOURCE_EXHAUSTED', async () => {
    const { port } = await start({ maxStreamBufferBytes: MIB });
    const s = open(client(port), CHECK_PATH);
    const answered = reply(s);
    s.write(partial(2 * MIB, 0));
    const r = await answered;
    expect(statusOf(r)).toBe(GrpcStatus.RESOURCE_EXHAUSTED);
    expect(r.rstCode).toBe(constants.NGHTTP2_NO_ERROR);
  });
});

describe('answers the peer does not read', () => {
  it('a stream whose peer advertises a zero window stops being read, and every answer still comes, in order, once it opens', async () => {
    const { port, seen } = await start();
    const session = client(port, { settings: { initialWindowSize: 0 } });
    const s = open(session, PROCESS_PATH);
    const answered = reply(s);
    const count = 50_000;
    const one = frame(processRequest('request_body'));
    s.end(Buffer.concat(Array.from({ length: count }, () => one)));
    await eventually(() => seen.messages > 0, 5000, 'the first messages to be read');
    // The peer's writes stop at the server's stream window: it holds most of its own bytes.
    // The server stops reading once its answers back up; the client's writes then stop at the server's
    // stream window. Settled: no message read across two PING round trips (PINGs pass in order with DATA).
    const ping = (): Promise<void> => new Promise((resolve) => session.ping(() => resolve()));
    for (let still = 0; still < 2; ) {
      const before = seen.messages;
      await ping();
      still = seen.messages === before ? still + 1 : 0;
    }
    expect(seen.messages).toBeLessThan(count / 2);
    session.settings({ initialWindowSize: 65_535 });
    const r = await answered;
    expect(statusOf(r)).toBe(GrpcStatus.OK);
    const got = messages(r.data);
    expect(got).toHaveLength(count);
    expect(seen.messages).toBe(count);
  });
});

describe('compressed messages', () => {
  it('are inflated off the event loop: with the thread pool busy, a plain call behind a gzip bomb is answered first', async () => {
    const { port } = await start();
    const session = client(port);
    // Occupy every libuv thread with an open() of a FIFO that has no writer yet (it blocks, using no CPU).
    const fifo = join(mkdtempSync(join(tmpdir(), 'sandgate-fifo-')), 'pool');
    execFileSync('mkfifo', [fifo]);
    const poolSize = Number(process.env.UV_THREADPOOL_SIZE ?? 4);
    const blockers = Array.from({ length: poolSize }, () => new Promise<number>((resolve, reject) => openFile(fifo, 'r', (err, fd) => (err ? reject(err) : resolve(fd)))));
    try {
      const bomb = open(session, CHECK_PATH, { 'grpc-encoding': 'gzip' });
      let bombAnswered = false;
      const bombReply = reply(bomb).then((r) => ((bombAnswered = true), r));
      bomb.end(frame(gzipSync(Buffer.alloc(64 * MIB)), 1));
      const plain = open(session, CHECK_PATH);
      const plainReply = reply(plain);
      plain.end(frame(checkRequest('plain')));
      expect(statusOf(await plainReply)).toBe(GrpcStatus.OK);
      expect(bombAnswered).toBe(false);
      // Free the pool: the bomb is inflated, stops at the receive limit, and is refused.
      closeSync(openSync(fifo, 'w'));
      const r = await bombReply;
      expect(statusOf(r)).toBe(GrpcStatus.RESOURCE_EXHAUSTED);
      expect(messageOf(r)).toContain('decompresses');
    } finally {
      const w = openSync(fifo, 'w');
      for (const fd of await Promise.all(blockers)) closeSync(fd);
      closeSync(w);
    }
  });
});

import { connect, constants, type ClientHttp2Session, type ClientHttp2Stream } from 'node:http2';
import { deflateSync, gzipSync } from 'node:zlib';
import { service as healthService } from 'grpc-health-check';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { GrpcH2Server, GrpcStatus, MAX_RECEIVE_MESSAGE_BYTES, percentEncode, type ServerCall } from '../../src/lib/grpc-h2-server.js';
import { HealthService } from '../../src/lib/grpc-health.js';
import { eventually } from '../helpers/eventually.js';
import { CHECK, CHECK_PATH, checkRequest, frame, HEALTH_PATH, messageOf, messages, open, PROCESS, PROCESS_PATH, processRequest, reply, statusOf, writeApart, type Reply } from '../helpers/grpc-wire.js';

/**
 * lib/grpc-h2-server.ts against a raw node:http2 client that sends what grpc-js's client never would:
 * wrong methods and content types, split and batched frames, truncated and oversized messages, compressed
 * flags, deadlines and resets. Statuses are grpc-js Server's for the same case (server.js,
 * server-interceptors.js) unless the test says otherwise.
 */

describe('GrpcH2Server (raw HTTP/2 client)', () => {
  let server: GrpcH2Server;
  let port: number;
  let session: ClientHttp2Session;
  /** Calls the unary handler holds (host "hold"), and the errors handlers threw. */
  const held: ServerCall<unknown, unknown>[] = [];
  const thrown: unknown[] = [];
  const health = new HealthService({ '': 'NOT_SERVING', known: 'SERVING' });

  beforeAll(async () => {
    server = new GrpcH2Server({ onHandlerError: (err) => thrown.push(err) });
    server.addUnary(CHECK, (call) => {
      const host = (call.request as { attributes?: { request?: { http?: { host?: string } } } }).attributes?.request?.http?.host;
      if (host === 'hold') held.push(call as ServerCall<unknown, unknown>);
      else if (host === 'throw') throw new Error('handler bug');
      else if (host === 'fail') call.fail(GrpcStatus.NOT_FOUND, 'nö 100%');
      else call.end({ status: { code: 0, message: host } });
    });
    server.addBidi(PROCESS, (call) => ({
      message: (m: { request?: string }) => call.write({ [m.request ?? 'request_body']: {} }),
      halfClose: () => call.end(),
    }));
    health.addTo(server);
    port = await server.listen('127.0.0.1', 0);
  });
  afterEach(() => {
    session?.close();
    held.length = 0;
  });
  afterAll(() => server.close(100));

  const connectNow = (): ClientHttp2Session => {
    session = connect(`http://127.0.0.1:${port}`);
    session.on('error', () => {});
    return session;
  };

  it('answers a unary call: headers, one message, trailers with grpc-status 0', async () => {
    const s = open(connectNow(), CHECK_PATH);
    s.end(frame(checkRequest('a.example')));
    const r = await reply(s);
    expect(r.headers[':status']).toBe(200);
    expect(r.headers['content-type']).toBe('application/grpc+proto');
    expect(statusOf(r)).toBe(GrpcStatus.OK);
    expect(r.trailers?.['grpc-status']).toBe('0');
    const [body] = messages(r.data);
    expect(CHECK.responseDeserialize(body!)).toMatchObject({ status: { message: 'a.example' } });
  });

  it.each([['GET'], ['PUT']])('refuses %s with HTTP 405', async (method) => {
    const s = open(connectNow(), CHECK_PATH, { ':method': method });
    s.end();
    const r = await reply(s);
    expect(r.headers[':status']).toBe(405);
    expect(r.headers.allow).toBe('POST');
  });

  it.each([['text/plain'], ['application/grpcfoo'], ['application/json']])('refuses content-type %s with HTTP 415', async (type) => {
    const s = open(connectNow(), CHECK_PATH, { 'content-type': type });
    s.end(frame(checkRequest('a')));
    expect((await reply(s)).headers[':status']).toBe(415);
  });

  it('accepts application/grpc+proto', async () => {
    const s = open(connectNow(), CHECK_PATH, { 'content-type': 'application/grpc+proto' });
    s.end(frame(checkRequest('a')));
    expect(statusOf(await reply(s))).toBe(GrpcStatus.OK);
  });

  it('answers an unknown path UNIMPLEMENTED, trailers-only', async () => {
    const s = open(connectNow(), '/no.Such/Method');
    s.end(frame(Buffer.alloc(0)));
    const r = await reply(s);
    expect(r.headers['grpc-status']).toBe(String(GrpcStatus.UNIMPLEMENTED));
    expect(r.trailers).toBeUndefined();
    expect(messageOf(r)).toContain('/no.Such/Method');
  });

  it('reassembles a message split across DATA frames, the prefix itself split', async () => {
    const s = open(connectNow(), CHECK_PATH);
    const bytes = frame(checkRequest('split.example'));
    await writeApart(s, [bytes.subarray(0, 2), bytes.subarray(2, 4), bytes.subarray(4, 9), bytes.subarray(9)]);
    s.end();
    const r = await reply(s);
    expect(statusOf(r)).toBe(GrpcStatus.OK);
    expect(CHECK.responseDeserialize(messages(r.data)[0]!)).toMatchObject({ status: { message: 'split.example' } });
  });

  it('answers every message of several in one DATA frame on a bidi stream, in order', async () => {
    const s = open(connectNow(), PROCESS_PATH);
    s.end(Buffer.concat([frame(processRequest('request_headers')), frame(processRequest('response_headers')), frame(processRequest('request_trailers'))]));
    const r = await reply(s);
    expect(statusOf(r)).toBe(GrpcStatus.OK);
    expect(messages(r.data).map((m) => Object.keys(PROCESS.responseDeserialize(m) as object)[0])).toEqual(['request_headers', 'response_headers', 'request_trailers']);
  });

  it('a message split across frames followed by another in the last frame', async () => {
    const s = open(connectNow(), PROCESS_PATH);
    const a = frame(processRequest('request_headers'));
    const b = frame(processRequest('response_body'));
    await writeApart(s, [a.subarray(0, 3), Buffer.concat([a.subarray(3), b])]);
    s.end();
    const r = await reply(s);
    expect(messages(r.data).map((m) => Object.keys(PROCESS.responseDeserialize(m) as object)[0])).toEqual(['request_headers', 'response_body']);
  });

  it('a truncated message then half-close is INTERNAL and reaches no handler', async () => {
    const s = open(connectNow(), CHECK_PATH);
    s.end(frame(checkRequest('truncated')).subarray(0, 8));
    const r = await reply(s);
    expect(statusOf(r)).toBe(GrpcStatus.INTERNAL);
    expect(held).toHaveLength(0);
  });

  it('refuses a length prefix over 4 MiB with RESOURCE_EXHAUSTED before buffering the message', async () => {
    const s = open(connectNow(), CHECK_PATH);
    const prefix = Buffer.alloc(5);
    prefix.writeUInt32BE(0xffff_fff0, 1);
    s.write(prefix);
    // No more bytes and no half-close: the answer comes from the prefix alone, and a reset tells the
    // client to stop sending.
    const r = await reply(s);
    expect(r.rstCode).toBe(constants.NGHTTP2_NO_ERROR);
    expect(statusOf(r)).toBe(GrpcStatus.RESOURCE_EXHAUSTED);
    expect(messageOf(r)).toContain(String(MAX_RECEIVE_MESSAGE_BYTES));
  });

  it('accepts a message of exactly 4 MiB (the limit is inclusive, as in grpc-js)', async () => {
    const s = open(connectNow(), PROCESS_PATH);
    const big = PROCESS.requestSerialize({ request_body: { body: Buffer.alloc(MAX_RECEIVE_MESSAGE_BYTES - 10) } });
    expect(big.length).toBe(MAX_RECEIVE_MESSAGE_BYTES);
    s.end(frame(big));
    const r = await reply(s);
    expect(statusOf(r)).toBe(GrpcStatus.OK);
    expect(messages(r.data)).toHaveLength(1);
  });

  it('a compressed flag without grpc-encoding is INTERNAL', async () => {
    const s = open(connectNow(), CHECK_PATH);
    s.end(frame(gzipSync(checkRequest('a')), 1));
    const r = await reply(s);
    expect(statusOf(r)).toBe(GrpcStatus.INTERNAL);
    expect(messageOf(r)).toContain('grpc-encoding');
  });

  it('a flag byte other than 0 or 1 is INTERNAL', async () => {
    const s = open(connectNow(), CHECK_PATH);
    s.end(frame(checkRequest('a'), 2));
    expect(statusOf(await reply(s))).toBe(GrpcStatus.INTERNAL);
  });

  it.each([
    ['gzip', gzipSync],
    ['deflate', deflateSync],
  ])('decodes a %s-compressed message', async (encoding, compress) => {
    const s = open(connectNow(), CHECK_PATH, { 'grpc-encoding': encoding });
    s.end(frame(compress(checkRequest(`${encoding}.example`)), 1));
    const r = await reply(s);
    expect(statusOf(r)).toBe(GrpcStatus.OK);
    expect(CHECK.responseDeserialize(messages(r.data)[0]!)).toMatchObject({ status: { message: `${encoding}.example` } });
  });

  it('stops inflating a gzip bomb at the receive limit: RESOURCE_EXHAUSTED', async () => {
    const bomb = gzipSync(Buffer.alloc(64 * 1024 * 1024));
    expect(bomb.length).toBeLessThan(MAX_RECEIVE_MESSAGE_BYTES);
    const s = open(connectNow(), CHECK_PATH, { 'grpc-encoding': 'gzip' });
    s.end(frame(bomb, 1));
    const r = await reply(s);
    expect(statusOf(r)).toBe(GrpcStatus.RESOURCE_EXHAUSTED);
    expect(messageOf(r)).toContain('decompresses');
  });

  it('garbage under gzip is INTERNAL', async () => {
    const s = open(connectNow(), CHECK_PATH, { 'grpc-encoding': 'gzip' });
    s.end(frame(Buffer.from('not gzip at all'), 1));
    expect(statusOf(await reply(s))).toBe(GrpcStatus.INTERNAL);
  });

  it('a message compressed with an unknown encoding is UNIMPLEMENTED with grpc-accept-encoding', async () => {
    const s = open(connectNow(), CHECK_PATH, { 'grpc-encoding': 'snappy' });
    s.end(frame(checkRequest('a'), 1));
    const r = await reply(s);
    expect(statusOf(r)).toBe(GrpcStatus.UNIMPLEMENTED);
    expect(r.headers['grpc-accept-encoding']).toBe('identity,deflate,gzip');
  });

  it('an unknown grpc-encoding with uncompressed messages is served (the flag decides, as in grpc-js)', async () => {
    const s = open(connectNow(), CHECK_PATH, { 'grpc-encoding': 'snappy' });
    s.end(frame(checkRequest('a')));
    expect(statusOf(await reply(s))).toBe(GrpcStatus.OK);
  });

  it('an undecodable message is INTERNAL', async () => {
    const s = open(connectNow(), CHECK_PATH);
    s.end(frame(Buffer.from([0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f])));
    const r = await reply(s);
    expect(statusOf(r)).toBe(GrpcStatus.INTERNAL);
    expect(messageOf(r)).toContain('deserializing');
  });

  it('two messages on a unary call: UNIMPLEMENTED, and the handler never runs', async () => {
    const s = open(connectNow(), CHECK_PATH);
    s.end(Buffer.concat([frame(checkRequest('hold')), frame(checkRequest('hold'))]));
    const r = await reply(s);
    expect(statusOf(r)).toBe(GrpcStatus.UNIMPLEMENTED);
    expect(messageOf(r)).toContain('second request message');
    expect(held).toHaveLength(0);
  });

  it('no message on a unary call: UNIMPLEMENTED', async () => {
    const s = open(connectNow(), CHECK_PATH);
    s.end();
    const r = await reply(s);
    expect(statusOf(r)).toBe(GrpcStatus.UNIMPLEMENTED);
    expect(messageOf(r)).toContain('no request message');
  });

  it('a handler that throws ends the call UNKNOWN (as grpc-js) and is reported', async () => {
    const s = open(connectNow(), CHECK_PATH);
    s.end(frame(checkRequest('throw')));
    expect(statusOf(await reply(s))).toBe(GrpcStatus.UNKNOWN);
    expect(thrown.map(String)).toContain('Error: handler bug');
  });

  it('percent-encodes grpc-message', async () => {
    expect(percentEncode('plain text')).toBe('plain text');
    expect(percentEncode('nö 100%\n')).toBe('n%C3%B6 100%25%0A');
    const s = open(connectNow(), CHECK_PATH);
    s.end(frame(checkRequest('fail')));
    const r = await reply(s);
    expect(statusOf(r)).toBe(GrpcStatus.NOT_FOUND);
    expect(messageOf(r)).toBe('n%C3%B6 100%25');
  });

  it('grpc-timeout passing ends the call DEADLINE_EXCEEDED and aborts its signal', async () => {
    const s = open(connectNow(), CHECK_PATH, { 'grpc-timeout': '50m' });
    s.end(frame(checkRequest('hold')));
    await eventually(() => held.length === 1, 5000, 'the call to reach the handler');
    const signal = held[0]!.signal;
    const r = await reply(s);
    expect(statusOf(r)).toBe(GrpcStatus.DEADLINE_EXCEEDED);
    expect(signal.aborted).toBe(true);
    // The handler's late answer goes nowhere.
    held[0]!.end({});
  });

  it.each([['1x'], ['123456789S'], ['-1S'], ['S']])('an invalid grpc-timeout %s is INTERNAL', async (value) => {
    const s = open(connectNow(), CHECK_PATH, { 'grpc-timeout': value });
    s.end(frame(checkRequest('a')));
    expect(statusOf(await reply(s))).toBe(GrpcStatus.INTERNAL);
  });

  it.each([
    ['a client RST_STREAM', (s: ClientHttp2Stream) => s.close(constants.NGHTTP2_CANCEL)],
    ['a dropped connection', () => session.destroy()],
  ])('%s aborts the signal of a held call', async (_what, end) => {
    const s = open(connectNow(), CHECK_PATH);
    s.end(frame(checkRequest('hold')));
    await eventually(() => held.length === 1, 5000, 'the call to reach the handler');
    const signal = held[0]!.signal;
    const aborted = new Promise((resolve) => signal.addEventListener('abort', resolve));
    end(s);
    await aborted;
  });

  it('health Check: a known service, the server (""), and NOT_FOUND for an unknown one', async () => {
    const ask = async (service: string): Promise<Reply> => {
      const s = open(connectNow(), HEALTH_PATH + 'Check');
      s.end(frame(Buffer.from(service === '' ? [] : [0x0a, service.length, ...Buffer.from(service)])));
      return reply(s);
    };
    const known = await ask('known');
    expect(messages(known.data)[0]).toEqual(Buffer.from([0x08, 1]));
    const server = await ask('');
    expect(messages(server.data)[0]).toEqual(Buffer.from([0x08, 2]));
    expect(statusOf(await ask('other'))).toBe(GrpcStatus.NOT_FOUND);
  });

  it('health List: every service and its status', async () => {
    const s = open(connectNow(), HEALTH_PATH + 'List');
    s.end(frame(Buffer.alloc(0)));
    const r = await reply(s);
    expect(statusOf(r)).toBe(GrpcStatus.OK);
    const list = healthService.List!.responseDeserialize(messages(r.data)[0]!) as { statuses: Record<string, { status: string }> };
    expect(list.statuses).toEqual({ '': { status: 'NOT_SERVING' }, known: { status: 'SERVING' } });
  });

  it('answers HTTP/2 pings (Envoy keeps connections and pings them)', async () => {
    const sess = connectNow();
    await new Promise((resolve) => sess.once('connect', resolve));
    const err = await new Promise<Error | null>((resolve) => sess.ping((e) => resolve(e)));
    expect(err).toBeNull();
  });

  it('health Watch: the status now, each change, SERVICE_UNKNOWN then updates for an unknown service; a second request message is UNIMPLEMENTED', async () => {
    const sess = connectNow();
    const watch = (service: string): { s: ClientHttp2Stream; got: Buffer[] } => {
      const s = open(sess, HEALTH_PATH + 'Watch');
      s.end(frame(Buffer.from([0x0a, service.length, ...Buffer.from(service)])));
      const got: Buffer[] = [];
      s.on('data', (d: Buffer) => got.push(...messages(d)));
      return { s, got };
    };
    const a = watch('known');
    const b = watch('later');
    await eventually(() => a.got.length === 1 && b.got.length === 1, 5000, 'the first status of both watches');
    expect(a.got[0]).toEqual(Buffer.from([0x08, 1]));
    expect(b.got[0]).toEqual(Buffer.from([0x08, 3]));
    health.setStatus('known', 'NOT_SERVING');
    health.setStatus('known', 'NOT_SERVING');
    health.setStatus('later', 'SERVING');
    await eventually(() => a.got.length === 2 && b.got.length === 2, 5000, 'one update on each watch');
    expect(a.got[1]).toEqual(Buffer.from([0x08, 2]));
    expect(b.got[1]).toEqual(Buffer.from([0x08, 1]));
    a.s.close(constants.NGHTTP2_CANCEL);
    b.s.close(constants.NGHTTP2_CANCEL);
    health.setStatus('known', 'SERVING');

    const twice = open(sess, HEALTH_PATH + 'Watch');
    const msg = frame(Buffer.from([0x0a, 5, ...Buffer.from('known')]));
    twice.end(Buffer.concat([msg, msg]));
    expect(statusOf(await reply(twice))).toBe(GrpcStatus.UNIMPLEMENTED);
  });
});

/** A server whose Check handler holds every call (in `held`), and a client connection to it. */
async function holdingServer() {
  const held: ServerCall<unknown, unknown>[] = [];
  const server = new GrpcH2Server({ onHandlerError: () => {} });
  server.addUnary(CHECK, (call) => void held.push(call as ServerCall<unknown, unknown>));
  const port = await server.listen('127.0.0.1', 0);
  const session = connect(`http://127.0.0.1:${port}`);
  session.on('error', () => {});
  return { held, server, port, session };
}

describe('GrpcH2Server.close', () => {
  it('graceful: refuses new connections and streams, lets the call in flight finish, then resolves', async () => {
    const { held, server, port, session } = await holdingServer();
    try {
      const inFlight = open(session, CHECK_PATH);
      inFlight.end(frame(checkRequest('hold')));
      const answered = reply(inFlight);
      await eventually(() => held.length === 1, 5000, 'the call to reach the handler');
      const goaway = new Promise((resolve) => session.once('goaway', resolve));
      let closed = false;
      const closing = server.close(60_000).then(() => (closed = true));
      await goaway;
      // A new connection is refused; a new stream on the old one is refused by GOAWAY.
      const late = connect(`http://127.0.0.1:${port}`);
      const refused = await new Promise<unknown>((resolve) => late.once('error', resolve));
      expect((refused as NodeJS.ErrnoException).code).toBe('ECONNREFUSED');
      expect(closed).toBe(false);
      held[0]!.end({ status: { code: 0 } });
      const r = await answered;
      expect(statusOf(r)).toBe(GrpcStatus.OK);
      await closing;
    } finally {
      session.destroy();
    }
  });

  it('after the grace period: destroys the connections and the held call aborts', async () => {
    const { held, server, session } = await holdingServer();
    const s = open(session, CHECK_PATH);
    s.end(frame(checkRequest('hold')));
    const answered = reply(s);
    await eventually(() => held.length === 1, 5000, 'the call to reach the handler');
    const signal = held[0]!.signal;
    await server.close(50);
    await answered;
    await eventually(() => signal.aborted, 5000, 'the held call to abort');
    session.destroy();
  });
});

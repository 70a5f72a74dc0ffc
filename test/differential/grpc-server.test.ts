import { connect, type ClientHttp2Session, type OutgoingHttpHeaders } from 'node:http2';
import { deflateSync, gzipSync } from 'node:zlib';
import { credentials, makeGenericClientConstructor, Server, ServerCredentials, status, type Client, type ServiceDefinition, type ServiceError } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GrpcH2Server, GrpcStatus, MAX_RECEIVE_MESSAGE_BYTES } from '../../src/lib/grpc-h2-server.js';
import { eventually } from '../helpers/eventually.js';
import { fuzzPlan } from '../helpers/fuzz.js';
import { frame, reply, statusOf } from '../helpers/grpc-wire.js';

/**
 * lib/grpc-h2-server.ts against grpc-js's Server with the same echo handlers: the same calls through a
 * grpc-js client (unary, bidi, deadlines, cancellation, sizes around the receive limit, compressed
 * messages) and the same malformed requests through raw node:http2 (bad content-type, missing `te`,
 * compressed flags and encodings) must end with the same gRPC status, and successful calls with the same
 * payloads. Sizes stay under GrpcH2Server's per-stream and per-connection buffer bounds (8 and 16 MiB),
 * which grpc-js does not have, and calls run one at a time (under its 100 concurrent streams).
 */

const ECHO_PATH = '/sandgate.test.Echo/Echo';
const STREAM_PATH = '/sandgate.test.Echo/EchoStream';
const identity = (b: Buffer): Buffer => b;
const definition = (path: string, stream: boolean) => ({
  path,
  requestStream: stream,
  responseStream: stream,
  requestSerialize: identity,
  requestDeserialize: identity,
  responseSerialize: identity,
  responseDeserialize: identity,
  originalName: path.slice(path.lastIndexOf('/') + 1),
});
const ECHO = definition(ECHO_PATH, false);
const ECHO_STREAM = definition(STREAM_PATH, true);
const SERVICE = { Echo: ECHO, EchoStream: ECHO_STREAM } as unknown as ServiceDefinition;
type EchoClient = Client & {
  Echo(req: Buffer, opts: { deadline?: number }, cb: (err: ServiceError | null, res?: Buffer) => void): { cancel(): void };
  EchoStream(opts?: { deadline?: number }): NodeJS.ReadWriteStream & { cancel(): void; on(ev: 'status', cb: (s: { code: number }) => void): unknown };
};
const EchoClient = makeGenericClientConstructor(SERVICE, 'Echo') as unknown as new (addr: string, creds: ReturnType<typeof credentials.createInsecure>, opts: object) => EchoClient;

/** Requests starting so are not answered until the call ends (deadlines, cancellation); the server records them then. */
const HOLD = Buffer.from('hold');
const held = (m: Buffer): boolean => m.subarray(0, HOLD.length).equals(HOLD);
/** A request the echo handlers fail with NOT_FOUND. */
const FAIL = Buffer.from('fail');

interface Target {
  readonly name: string;
  port: number;
  client: EchoClient;
  /** The held requests whose cancellation the server side saw (signal abort / grpc-js 'cancelled'). */
  readonly cancelled: string[];
  /** The held requests the server side received. */
  readonly held: string[];
}

describe('GrpcH2Server against grpc-js Server (same handlers, same statuses)', () => {
  const h2: Target = { name: 'grpc-h2-server', port: 0, client: undefined!, cancelled: [], held: [] };
  const js: Target = { name: 'grpc-js', port: 0, client: undefined!, cancelled: [], held: [] };
  let h2Server: GrpcH2Server;
  let jsServer: Server;
  let sessions: Map<Target, ClientHttp2Session>;

  beforeAll(async () => {
    h2Server = new GrpcH2Server({ onHandlerError: () => {} });
    h2Server.addUnary<Buffer, Buffer>(ECHO, (call) => {
      if (held(call.request)) {
        h2.held.push(call.request.toString());
        call.signal.addEventListener('abort', () => h2.cancelled.push(call.request.toString()));
      }
      else if (call.request.equals(FAIL)) call.fail(GrpcStatus.NOT_FOUND, 'fail');
      else call.end(call.request);
    });
    h2Server.addBidi<Buffer, Buffer>(ECHO_STREAM, (call) => ({
      message: (m) => {
        if (held(m)) {
          h2.held.push(m.toString());
          call.signal.addEventListener('abort', () => h2.cancelled.push(m.toString()));
        }
        else call.write(m);
      },
      halfClose: () => call.end(),
    }));
    h2.port = await h2Server.listen('127.0.0.1', 0);

    jsServer = new Server();
    jsServer.addService(SERVICE, {
      Echo: (call: { request: Buffer; on(ev: 'cancelled', cb: () => void): void }, cb: (err: Partial<ServiceError> | null, res?: Buffer) => void) => {
        if (held(call.request)) {
          js.held.push(call.request.toString());
          call.on('cancelled', () => js.cancelled.push(call.request.toString()));
        }
        else if (call.request.equals(FAIL)) cb({ code: status.NOT_FOUND, details: 'fail' });
        else cb(null, call.request);
      },
      EchoStream: (call: NodeJS.ReadWriteStream & { on(ev: 'cancelled', cb: () => void): void }) => {
        call.on('data', (m: Buffer) => {
          if (held(m)) {
            js.held.push(m.toString());
            call.on('cancelled', () => js.cancelled.push(m.toString()));
          }
          else call.write(m);
        });
        call.on('end', () => call.end());
      },
    });
    js.port = await new Promise<number>((resolve, reject) =>
      jsServer.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (err, port) => (err ? reject(err) : resolve(port))),
    );
    for (const t of [h2, js]) t.client = new EchoClient(`127.0.0.1:${t.port}`, credentials.createInsecure(), { 'grpc.max_receive_message_length': -1 });
    sessions = new Map([h2, js].map((t) => [t, connect(`http://127.0.0.1:${t.port}`).on('error', () => {})]));
  });
  afterAll(async () => {
    for (const t of [h2, js]) t.client.close();
    for (const s of sessions.values()) s.close();
    jsServer.forceShutdown();
    await h2Server.close(100);
  });

  const unary = (t: Target, req: Buffer, deadline?: number): Promise<{ code: number; payload?: Buffer }> =>
    new Promise((resolve) => t.client.Echo(req, deadline === undefined ? {} : { deadline }, (err, res) => resolve(err ? { code: err.code } : { code: 0, payload: res })));

  const bidi = (t: Target, reqs: Buffer[], opts: { deadline?: number; cancelAfterWrite?: boolean } = {}): Promise<{ code: number; payloads: Buffer[] }> =>
    new Promise((resolve) => {
      const call = t.client.EchoStream(opts.deadline === undefined ? {} : { deadline: opts.deadline });
      const payloads: Buffer[] = [];
      call.on('data', (m: Buffer) => payloads.push(m));
      call.on('error', () => {});
      call.on('status', (s) => resolve({ code: s.code, payloads }));
      const before = t.held.length;
      for (const r of reqs) call.write(r);
      // Cancelled once the server holds the call, not after a guess at how long that takes.
      if (opts.cancelAfterWrite === true) void eventually(() => t.held.length > before, 5000, `${t.name} to hold the call`).then(() => call.cancel());
      else if (opts.deadline === undefined) call.end();
    });

  /** A raw node:http2 request to each server; its gRPC status, or `http <status>` when the answer is not gRPC. */
  async function raw(headers: OutgoingHttpHeaders, body: Buffer): Promise<Record<string, string>> {
    const out: Record<string, string> = {};
    for (const t of [h2, js]) {
      const s = sessions.get(t)!.request({ ':method': 'POST', ':path': ECHO_PATH, 'content-type': 'application/grpc', te: 'trailers', ...headers });
      s.end(body);
      const r = await reply(s);
      out[t.name] = Number(r.headers[':status']) === 200 ? `grpc ${statusOf(r)}` : `http ${String(r.headers[':status'])}`;
    }
    return out;
  }

  it('unary echo of random payloads, and a handler failure: same status, same bytes', async () => {
    const plan = fuzzPlan(20, 0x6a1e_0001);
    for (let i = 0; i < plan.runs; i++) {
      const req = Buffer.from(Array.from({ length: Math.floor(plan.random() * 2048) }, () => Math.floor(plan.random() * 256)));
      const [a, b] = await Promise.all([unary(h2, req), unary(js, req)]);
      const where = `seed ${plan.seed} case ${i} (${req.length} bytes)`;
      expect(a.code, where).toBe(b.code);
      expect(a.code, where).toBe(GrpcStatus.OK);
      expect(a.payload?.equals(req), where).toBe(true);
      expect(b.payload?.equals(req), where).toBe(true);
    }
    const [a, b] = await Promise.all([unary(h2, FAIL), unary(js, FAIL)]);
    expect([a.code, b.code]).toEqual([GrpcStatus.NOT_FOUND, GrpcStatus.NOT_FOUND]);
  });

  it('bidi echo of random message sequences: same status, same messages in order', async () => {
    const plan = fuzzPlan(10, 0x6a1e_0002);
    for (let i = 0; i < plan.runs; i++) {
      const reqs = Array.from({ length: Math.floor(plan.random() * 8) }, () =>
        Buffer.from(Array.from({ length: 1 + Math.floor(plan.random() * 512) }, () => Math.floor(plan.random() * 256))),
      );
      const [a, b] = await Promise.all([bidi(h2, reqs), bidi(js, reqs)]);
      const where = `seed ${plan.seed} case ${i} (${reqs.length} messages)`;
      expect(a.code, where).toBe(b.code);
      expect(a.code, where).toBe(GrpcStatus.OK);
      expect(Buffer.concat(a.payloads).equals(Buffer.concat(reqs)), where).toBe(true);
      expect(Buffer.concat(b.payloads).equals(Buffer.concat(reqs)), where).toBe(true);
    }
  });

  it('message sizes around the 4 MiB receive limit: OK at or under it, RESOURCE_EXHAUSTED past it, on both', async () => {
    const plan = fuzzPlan(3, 0x6a1e_0003);
    // Four 4 MiB calls a case: `npm run fuzz` runs at most 200 of them, within its per-test timeout.
    for (let i = 0; i < Math.min(plan.runs, 200); i++) {
      const size = MAX_RECEIVE_MESSAGE_BYTES - 16 + Math.floor(plan.random() * 33);
      const req = Buffer.alloc(size, Math.floor(plan.random() * 256));
      const where = `seed ${plan.seed} case ${i} (${size} bytes)`;
      const expected = size > MAX_RECEIVE_MESSAGE_BYTES ? GrpcStatus.RESOURCE_EXHAUSTED : GrpcStatus.OK;
      for (const t of [h2, js]) expect((await unary(t, req)).code, `${t.name} ${where}`).toBe(expected);
      for (const t of [h2, js]) expect((await bidi(t, [req])).code, `${t.name} bidi ${where}`).toBe(expected);
    }
  });

  it('a deadline that passes while the handler holds the call: DEADLINE_EXCEEDED from both', async () => {
    const req = Buffer.from('hold: deadline');
    const deadline = Date.now() + 200;
    const results = await Promise.all([unary(h2, req, deadline), unary(js, req, deadline), bidi(h2, [req], { deadline }), bidi(js, [req], { deadline })]);
    expect(results.map((r) => r.code)).toEqual(Array(4).fill(GrpcStatus.DEADLINE_EXCEEDED));
    // Both servers see the unary call end (the bidi call may add a second entry: grpc-js's client cancels
    // at the deadline with a half-close before its RST_STREAM, racing the server's own timer; when the
    // half-close wins, the echo handler ends the call and grpc-h2-server's signal stays unaborted, as
    // documented for handler ends, while grpc-js still emits 'cancelled' on the reset).
    await expect.poll(() => [h2.cancelled.includes(req.toString()), js.cancelled.includes(req.toString())]).toEqual([true, true]);
  });

  it('a client cancelling held calls: CANCELLED on both, and both servers see the unary cancellation', async () => {
    const req = Buffer.from('hold: cancel');
    const cancelUnary = (t: Target): Promise<number> =>
      new Promise((resolve) => {
        const before = t.held.length;
        const call = t.client.Echo(req, {}, (err) => resolve(err?.code ?? GrpcStatus.OK));
        void eventually(() => t.held.length > before, 5000, `${t.name} to hold the call`).then(() => call.cancel());
      });
    expect(await Promise.all([cancelUnary(h2), cancelUnary(js)])).toEqual([status.CANCELLED, status.CANCELLED]);
    await expect.poll(() => [h2.cancelled.includes(req.toString()), js.cancelled.includes(req.toString())]).toEqual([true, true]);
    // A cancelled bidi call: the client half-closes before its RST_STREAM (see the deadline case), so only
    // the client's status is compared.
    const results = await Promise.all([bidi(h2, [HOLD], { cancelAfterWrite: true }), bidi(js, [HOLD], { cancelAfterWrite: true })]);
    expect(results.map((r) => r.code)).toEqual([status.CANCELLED, status.CANCELLED]);
  });

  it('compressed messages (gzip, deflate, random payloads) echo the same; a bad flag or encoding fails the same', async () => {
    const plan = fuzzPlan(10, 0x6a1e_0004);
    for (let i = 0; i < plan.runs; i++) {
      const body = Buffer.from(Array.from({ length: Math.floor(plan.random() * 4096) }, () => Math.floor(plan.random() * 4)));
      const gzip = plan.random() < 0.5;
      const got = await raw({ 'grpc-encoding': gzip ? 'gzip' : 'deflate' }, frame(gzip ? gzipSync(body) : deflateSync(body), 1));
      expect(got, `seed ${plan.seed} case ${i} (${gzip ? 'gzip' : 'deflate'}, ${body.length} bytes)`).toEqual({ 'grpc-h2-server': 'grpc 0', 'grpc-js': 'grpc 0' });
    }
    const cases: [string, OutgoingHttpHeaders, Buffer][] = [
      ['gzip bytes that are not gzip', { 'grpc-encoding': 'gzip' }, frame(Buffer.from('not gzip'), 1)],
      ['an encoding neither supports', { 'grpc-encoding': 'snappy' }, frame(Buffer.from('x'), 1)],
    ];
    for (const [what, headers, body] of cases) {
      const got = await raw(headers, body);
      expect(got['grpc-h2-server'], what).toBe(got['grpc-js']);
    }
  });

  it('the compressed flag without grpc-encoding: an intended difference, INTERNAL from grpc-h2-server', async () => {
    // grpc-js takes the missing header as identity and reads the message as is; PROTOCOL-HTTP2.md calls a
    // set flag without an encoding a protocol error, which grpc-h2-server answers INTERNAL.
    const got = await raw({}, frame(Buffer.from('x'), 1));
    expect(got).toEqual({ 'grpc-h2-server': `grpc ${GrpcStatus.INTERNAL}`, 'grpc-js': 'grpc 0' });
  });

  it('a compressed message inflating past the receive limit: RESOURCE_EXHAUSTED on both', async () => {
    const got = await raw({ 'grpc-encoding': 'gzip' }, frame(gzipSync(Buffer.alloc(MAX_RECEIVE_MESSAGE_BYTES + 1)), 1));
    expect(got).toEqual({ 'grpc-h2-server': `grpc ${GrpcStatus.RESOURCE_EXHAUSTED}`, 'grpc-js': `grpc ${GrpcStatus.RESOURCE_EXHAUSTED}` });
  });

  it.each([['text/plain'], ['application/json'], [undefined]])('content-type %s: HTTP 415 from both', async (type) => {
    const got = await raw({ 'content-type': type }, frame(Buffer.from('x')));
    expect(got).toEqual({ 'grpc-h2-server': 'http 415', 'grpc-js': 'http 415' });
  });

  it('content-type application/grpcfoo: an intended difference, grpc-h2-server refuses what is not application/grpc[+|;]', async () => {
    // grpc-js only checks startsWith('application/grpc'); PROTOCOL-HTTP2.md's grammar has no such type.
    const got = await raw({ 'content-type': 'application/grpcfoo' }, frame(Buffer.from('x')));
    expect(got).toEqual({ 'grpc-h2-server': 'http 415', 'grpc-js': 'grpc 0' });
  });

  it('a request without `te: trailers`: answered the same by both (neither requires it)', async () => {
    const got = await raw({ te: undefined }, frame(Buffer.from('echo')));
    expect(got['grpc-h2-server']).toBe(got['grpc-js']);
  });
});

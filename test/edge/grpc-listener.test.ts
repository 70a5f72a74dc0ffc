import { credentials, makeGenericClientConstructor, type ClientReadableStream } from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';
import { connect, constants, type ClientHttp2Session, type ClientHttp2Stream, type IncomingHttpHeaders } from 'node:http2';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { authorizationService, externalProcessorService } from '../../src/edge/envoy/protos.js';
import { GrpcStatus } from '../../src/lib/grpc-h2-server.js';
import { eventually } from '../helpers/eventually.js';
import { envoyCheckRequest, envoyRequestHeaders, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';

/**
 * The gateway's gRPC listener (node:http2, lib/grpc-h2-server.ts) as Envoy drives it, from a raw HTTP/2
 * client: a deadline or a reset during a readiness wait must reach the Decider's waiter, and health must
 * behave as grpc-health-check's did.
 */

const CHECK = authorizationService().service.Check!;
const PROCESS = externalProcessorService().service.Process!;

function frame(body: Buffer): Buffer {
  const out = Buffer.alloc(5 + body.length);
  out.writeUInt32BE(body.length, 1);
  body.copy(out, 5);
  return out;
}

interface Reply {
  headers: IncomingHttpHeaders;
  trailers: IncomingHttpHeaders | undefined;
  data: Buffer;
}

function reply(stream: ClientHttp2Stream): Promise<Reply> {
  return new Promise((resolve) => {
    const r: Reply = { headers: {}, trailers: undefined, data: Buffer.alloc(0) };
    stream.on('response', (h) => (r.headers = h));
    stream.on('trailers', (h) => (r.trailers = h));
    stream.on('data', (d: Buffer) => (r.data = Buffer.concat([r.data, d])));
    stream.on('error', () => {});
    stream.on('close', () => resolve(r));
  });
}

const statusOf = (r: Reply): number => Number(r.trailers?.['grpc-status'] ?? r.headers['grpc-status']);

/** A host whose sandbox is Provisioning (no supervisor yet): the Decider waits for it to become ready. */
const WAITING = '8888-notebook.team-a.localhost';

describe('gRPC listener: deadlines and resets during a readiness wait', () => {
  let t: TestGateway;
  let session: ClientHttp2Session;

  beforeAll(async () => {
    const driver = new TestDriver([snapshot({ name: 'notebook', uid: 'u2', endpoint: { kind: 'address', addresses: ['127.0.0.3'] } })]);
    // A wait far longer than any test: only the deadline or the reset can end it.
    t = await startTestGateway([driver], { readinessWaitMs: 120_000 });
  });
  afterEach(async () => {
    session?.destroy();
    await eventually(() => t.gw.view.waiters.size === 0, 5000, 'no waiter left behind');
  });
  afterAll(() => t.close());

  const request = (path: string, headers: Record<string, string> = {}): ClientHttp2Stream => {
    session = connect(`http://127.0.0.1:${t.gw.grpcPort}`);
    session.on('error', () => {});
    return session.request({ ':method': 'POST', ':path': path, 'content-type': 'application/grpc', te: 'trailers', ...headers });
  };
  const checkBody = frame(CHECK.requestSerialize(envoyCheckRequest({ host: WAITING })));
  const processBody = frame(PROCESS.requestSerialize(envoyRequestHeaders({ ':authority': WAITING, ':path': '/', ':method': 'GET' })));

  it('ext_authz Check: grpc-timeout passing answers DEADLINE_EXCEEDED and releases the waiter', async () => {
    const s = request(CHECK.path, { 'grpc-timeout': '300m' });
    const answered = reply(s);
    s.end(checkBody);
    await eventually(() => t.gw.view.waiters.size === 1, 5000, 'the request to wait for readiness');
    const r = await answered;
    expect(statusOf(r)).toBe(GrpcStatus.DEADLINE_EXCEEDED);
    expect(t.gw.view.waiters.size).toBe(0);
  });

  // The Check case again, through ext_proc: its stream stays open while it waits, which is the case that
  // could leak a waiter, so it has its own test rather than a row in a table.
  it('ext_proc Process: grpc-timeout passing mid-stream answers DEADLINE_EXCEEDED and releases the waiter', async () => {
    const s = request(PROCESS.path, { 'grpc-timeout': '300m' });
    const answered = reply(s);
    // Envoy keeps its side open while it waits for the answer to request_headers.
    s.write(processBody);
    await eventually(() => t.gw.view.waiters.size === 1, 5000, 'the request to wait for readiness');
    const r = await answered;
    expect(statusOf(r)).toBe(GrpcStatus.DEADLINE_EXCEEDED);
    expect(t.gw.view.waiters.size).toBe(0);
  });

  it.each([
    ['ext_authz Check', CHECK.path, checkBody, true],
    ['ext_proc Process', PROCESS.path, processBody, false],
  ])('%s: RST_STREAM during the wait releases the waiter', async (_n, path, body, halfClose) => {
    const s = request(path);
    s.on('error', () => {});
    if (halfClose) s.end(body);
    else s.write(body);
    await eventually(() => t.gw.view.waiters.size === 1, 5000, 'the request to wait for readiness');
    s.close(constants.NGHTTP2_CANCEL);
    await eventually(() => t.gw.view.waiters.size === 0, 5000, 'the waiter to be released');
  });

  it('a dropped connection during the wait releases the waiter', async () => {
    const s = request(CHECK.path);
    s.on('error', () => {});
    s.end(checkBody);
    await eventually(() => t.gw.view.waiters.size === 1, 5000, 'the request to wait for readiness');
    session.destroy();
    await eventually(() => t.gw.view.waiters.size === 0, 5000, 'the waiter to be released');
  });
});

type HealthClient = {
  Check(r: unknown, cb: (e: (Error & { code?: number }) | null, v: { status: string }) => void): void;
  Watch(r: unknown): ClientReadableStream<{ status: string }>;
  close(): void;
};

describe('gRPC listener: grpc.health.v1.Health (grpc-js client)', () => {
  it('Check and Watch: NOT_SERVING until the drivers sync, SERVING after, NOT_SERVING from shutdown; unknown services', async () => {
    const driver = new TestDriver([], 'slow', true);
    const t = await startTestGateway([driver]);
    const Client = makeGenericClientConstructor(healthService, 'Health');
    const client = new Client(`127.0.0.1:${t.gw.grpcPort}`, credentials.createInsecure()) as unknown as HealthClient;
    const checkOf = (service: string): Promise<string | number> =>
      new Promise((resolve) => client.Check({ service }, (err, res) => resolve(err ? (err.code ?? -1) : res.status)));
    const watches: ClientReadableStream<{ status: string }>[] = [];
    const watch = (service: string): string[] => {
      const seen: string[] = [];
      const w = client.Watch({ service });
      w.on('data', (m: { status: string }) => seen.push(m.status));
      w.on('error', () => {});
      watches.push(w);
      return seen;
    };
    try {
      expect(await checkOf('')).toBe('NOT_SERVING');
      expect(await checkOf('envoy.service.auth.v3.Authorization')).toBe('NOT_SERVING');
      expect(await checkOf('no.such.Service')).toBe(GrpcStatus.NOT_FOUND);
      const server = watch('');
      const unknown = watch('no.such.Service');
      await eventually(() => server.length === 1 && unknown.length === 1, 5000, 'the first status of each watch');
      expect(server).toEqual(['NOT_SERVING']);
      expect(unknown).toEqual(['SERVICE_UNKNOWN']);
      driver.sync([snapshot({ sessionModel: 'none' })]);
      await eventually(() => server.length === 2, 5000, () => `SERVING on the watch (saw ${server.join(',')})`);
      expect(server).toEqual(['NOT_SERVING', 'SERVING']);
      expect(await checkOf('envoy.service.ext_proc.v3.ExternalProcessor')).toBe('SERVING');
      const closing = t.close();
      await eventually(() => server.length === 3, 5000, () => `NOT_SERVING on the watch at shutdown (saw ${server.join(',')})`);
      expect(server[2]).toBe('NOT_SERVING');
      for (const w of watches) w.cancel();
      await closing;
      expect(unknown).toEqual(['SERVICE_UNKNOWN']);
    } finally {
      for (const w of watches) w.cancel();
      client.close();
      await t.close();
    }
  });
});

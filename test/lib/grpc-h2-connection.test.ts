import { connect, type ClientHttp2Session } from 'node:http2';
import { afterEach, describe, expect, it } from 'vitest';
import { GrpcH2Server, GrpcStatus, type GrpcServerLimits, type ServerCall } from '../../src/lib/grpc-h2-server.js';
import { eventually, nextEvent } from '../helpers/eventually.js';
import { CHECK, CHECK_PATH, checkRequest, frame, open, reply, statusOf } from '../helpers/grpc-wire.js';
import { data, goaway, grpcHeaders, PREFACE, rawH2, type RawH2 } from '../helpers/raw-h2.js';

/**
 * Connections to the gRPC port do not outlive their use (lib/grpc-h2-connection.ts): one that never
 * finishes the HTTP/2 preface, one without a stream for the idle timeout, and one that sent or was sent
 * GOAWAY are closed, each after its own configured time.
 */

let server: GrpcH2Server | undefined;
const peers: { destroy(): void }[] = [];

afterEach(async () => {
  for (const p of peers.splice(0)) p.destroy();
  await server?.close(50);
  server = undefined;
});

const SHORT: Partial<GrpcServerLimits> = { handshakeTimeoutMs: 100, idleTimeoutMs: 150, goawayGraceMs: 100 };

async function start(limits: Partial<GrpcServerLimits>): Promise<{ port: number; held: ServerCall<unknown, unknown>[] }> {
  const held: ServerCall<unknown, unknown>[] = [];
  server = new GrpcH2Server({ onHandlerError: () => {}, limits });
  server.addUnary(CHECK, (call) => {
    const host = (call.request as { attributes?: { request?: { http?: { host?: string } } } }).attributes?.request?.http?.host;
    if (host === 'hold') held.push(call as ServerCall<unknown, unknown>);
    else call.end({ status: { code: 0 } });
  });
  return { port: await server.listen('127.0.0.1', 0), held };
}

function client(port: number): ClientHttp2Session {
  const session = connect(`http://127.0.0.1:${port}`);
  session.on('error', () => {});
  peers.push(session);
  return session;
}

async function raw(port: number, handshake: boolean): Promise<RawH2> {
  const r = await rawH2(port, handshake);
  peers.push(r);
  return r;
}

describe('gRPC connection lifetime', () => {
  it('a connection that sends nothing is closed after the handshake timeout', async () => {
    const { port } = await start(SHORT);
    const r = await raw(port, false);
    await eventually(() => r.closed, 5000, 'the silent connection to be closed');
  });

  it('a connection that sends half the preface is closed after the handshake timeout', async () => {
    const { port } = await start(SHORT);
    const r = await raw(port, false);
    r.write(PREFACE.subarray(0, 10));
    await eventually(() => r.closed, 5000, 'the half-preface connection to be closed');
  });

  it('a connection without a stream for the idle timeout gets GOAWAY and is closed; one with a call in flight stays', async () => {
    const { port, held } = await start({ idleTimeoutMs: 150 });
    const busy = client(port);
    const call = open(busy, CHECK_PATH);
    const answered = reply(call);
    call.end(frame(checkRequest('hold')));
    await eventually(() => held.length === 1, 5000, 'the call to be held');
    const idle = client(port);
    const done = open(idle, CHECK_PATH);
    const first = reply(done);
    done.end(frame(checkRequest('x')));
    expect(statusOf(await first)).toBe(GrpcStatus.OK);
    // The idle connection, opened after the busy one, is closed: the busy one has been open longer.
    await Promise.all([nextEvent(idle, 'goaway'), nextEvent(idle, 'close')]);
    expect(busy.closed || busy.destroyed).toBe(false);
    held[0]!.end({ status: { code: 0 } });
    expect(statusOf(await answered)).toBe(GrpcStatus.OK);
  });

  it('a connection that sent GOAWAY but keeps a call open is closed after the grace, and the call aborts', async () => {
    const { port, held } = await start({ goawayGraceMs: 100 });
    const r = await raw(port, true);
    r.write(Buffer.concat([grpcHeaders(1, CHECK_PATH), data(1, frame(checkRequest('hold')), true), goaway(0)]));
    await eventually(() => held.length === 1, 5000, 'the call to be held');
    await eventually(() => r.closed, 5000, 'the connection to be closed after the GOAWAY grace');
    await eventually(() => held[0]!.signal.aborted, 5000, 'the held call to abort');
  });
});

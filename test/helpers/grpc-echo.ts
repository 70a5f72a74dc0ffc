import { EventEmitter, once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { credentials, loadPackageDefinition, Metadata, Server, ServerCredentials, status, type ChannelCredentials, type Client, type ServiceError, type ServerUnaryCall, type ServerWritableStream, type ServerReadableStream, type ServerDuplexStream, type sendUnaryData } from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import { expect } from 'vitest';
import type { BackendSnapshot } from '../../src/domain/sandbox.js';

/**
 * A grpc-js echo service as the "sandbox" behind an h2c port, its client, and the calls every path that
 * carries gRPC to a sandbox must carry: unary, server, client and bidi streaming, and a deadline.
 */

export const PROTO = fileURLToPath(new URL('../fixtures/grpc/echo.proto', import.meta.url));
export const Echo = (loadPackageDefinition(loadSync(PROTO)) as any).sandgate.test.echo.Echo as new (target: string, creds: ChannelCredentials, options?: Record<string, unknown>) => EchoClient;

export interface Msg {
  text: string;
  count?: number;
}
export type Unary = (req: Msg, md: Metadata, opts: { deadline?: number }, cb: (err: ServiceError | null, res?: Msg) => void) => { cancel(): void };
export type EchoClient = Client & {
  Unary: Unary;
  ServerStream(req: Msg, md?: Metadata): NodeJS.ReadableStream & { cancel(): void };
  ClientStream(cb: (err: ServiceError | null, res?: Msg) => void): NodeJS.WritableStream & { write(m: Msg): boolean };
  Bidi(): NodeJS.ReadWriteStream & { write(m: Msg): boolean };
};

export interface EchoServer {
  readonly port: number;
  /** Metadata of every call, as the server saw it. */
  readonly seen: Record<string, unknown>[];
  /** 'hang' when a hanging call arrived, 'cancelled' when one was cancelled. */
  readonly events: EventEmitter;
  close(): Promise<void>;
}

export async function startEchoServer(): Promise<EchoServer> {
  const seen: Record<string, unknown>[] = [];
  const events = new EventEmitter();
  const server = new Server();
  server.addService((Echo as unknown as { service: never }).service, {
    Unary(call: ServerUnaryCall<Msg, Msg>, cb: sendUnaryData<Msg>) {
      seen.push(call.metadata.getMap());
      const text = call.request.text;
      if (text === 'fail') {
        const md = new Metadata();
        md.set('x-detail', 'why');
        return cb({ code: status.INVALID_ARGUMENT, details: 'bad input ü', metadata: md });
      }
      if (text === 'hang') {
        call.on('cancelled', () => events.emit('cancelled'));
        events.emit('hang');
        return;
      }
      cb(null, { text: `echo ${text}` });
    },
    ServerStream(call: ServerWritableStream<Msg, Msg>) {
      for (let i = 0; i < (call.request.count ?? 0); i++) call.write({ text: `${call.request.text} ${i}` });
      call.end();
    },
    ClientStream(call: ServerReadableStream<Msg, Msg>, cb: sendUnaryData<Msg>) {
      const texts: string[] = [];
      call.on('data', (m: Msg) => texts.push(m.text));
      call.on('end', () => cb(null, { text: texts.join(','), count: texts.length }));
    },
    Bidi(call: ServerDuplexStream<Msg, Msg>) {
      call.on('data', (m: Msg) => call.write({ text: `echo ${m.text}` }));
      call.on('end', () => call.end());
    },
  });
  const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))));
  return { port, seen, events, close: () => new Promise<void>((resolve) => server.tryShutdown(() => resolve())) };
}

export function unary(c: EchoClient, text: string, md = new Metadata(), deadline?: number): Promise<Msg> {
  return new Promise((resolve, reject) => c.Unary({ text }, md, deadline === undefined ? {} : { deadline }, (err, res) => (err ? reject(err) : resolve(res!))));
}

export async function failure(p: Promise<unknown>): Promise<ServiceError> {
  try {
    await p;
  } catch (err) {
    return err as ServiceError;
  }
  throw new Error('the call succeeded');
}

export function client(proxyPort: number, authority: string, creds = credentials.createInsecure(), extra: Record<string, unknown> = {}): EchoClient {
  return new Echo(`127.0.0.1:${proxyPort}`, creds, { 'grpc.default_authority': authority, ...extra });
}

/** The calls every path must carry: unary, server, client and bidi streaming. */
export async function everyKindOfCall(c: EchoClient): Promise<void> {
  expect(await unary(c, 'hi')).toMatchObject({ text: 'echo hi' });
  const streamed: string[] = [];
  for await (const m of c.ServerStream({ text: 'n', count: 5 }) as AsyncIterable<Msg>) streamed.push(m.text);
  expect(streamed).toEqual(['n 0', 'n 1', 'n 2', 'n 3', 'n 4']);
  const summed = await new Promise<Msg>((resolve, reject) => {
    const call = c.ClientStream((err, res) => (err ? reject(err) : resolve(res!)));
    for (const t of ['a', 'b', 'c']) call.write({ text: t });
    call.end();
  });
  expect(summed).toMatchObject({ text: 'a,b,c', count: 3 });
  const bidi = c.Bidi();
  const answers: string[] = [];
  for (const t of ['x', 'y', 'z']) {
    bidi.write({ text: t });
    const [m] = (await once(bidi, 'data')) as [Msg];
    answers.push(m.text);
  }
  bidi.end();
  await once(bidi, 'end');
  expect(answers).toEqual(['echo x', 'echo y', 'echo z']);
}

/** A call that hangs past its deadline ends DEADLINE_EXCEEDED, and the server sees the call cancelled. */
export async function expectDeadlineReachesServer(c: EchoClient, echo: EchoServer): Promise<void> {
  const cancelled = once(echo.events, 'cancelled');
  const err = await failure(unary(c, 'hang', new Metadata(), Date.now() + 300));
  expect(err.code).toBe(status.DEADLINE_EXCEEDED);
  await cancelled;
}

export const h2c = (port: number): Partial<BackendSnapshot> => ({ ports: [port], h2cPorts: [port] });

/** The `sandgate_proxy_h2c_*` series of a gateway's /metrics (`admin`: its admin base URL), by name. */
export async function h2cSeries(admin: string): Promise<Map<string, number>> {
  const text = await (await fetch(`${admin}/metrics`)).text();
  const out = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (!line.startsWith('sandgate_proxy_h2c_')) continue;
    const at = line.lastIndexOf(' ');
    out.set(line.slice(0, at), Number(line.slice(at + 1)));
  }
  return out;
}

import type { ClientHttp2Session, ClientHttp2Stream, IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http2';
import { authorizationService, externalProcessorService } from '../../src/edge/envoy/protos.js';

/** gRPC over a raw node:http2 client: framing, the Envoy methods, and reading a call's answer. */

export const CHECK = authorizationService().service.Check!;
export const PROCESS = externalProcessorService().service.Process!;
export const CHECK_PATH = '/envoy.service.auth.v3.Authorization/Check';
export const PROCESS_PATH = '/envoy.service.ext_proc.v3.ExternalProcessor/Process';
export const HEALTH_PATH = '/grpc.health.v1.Health/';

/** A gRPC length-prefixed message. */
export function frame(body: Buffer, flag = 0): Buffer {
  const out = Buffer.alloc(5 + body.length);
  out[0] = flag;
  out.writeUInt32BE(body.length, 1);
  body.copy(out, 5);
  return out;
}

export const checkRequest = (host: string): Buffer => CHECK.requestSerialize({ attributes: { request: { http: { host, path: '/' } } } });
export const processRequest = (kind: string): Buffer => PROCESS.requestSerialize({ [kind]: {} });

export interface Reply {
  headers: IncomingHttpHeaders;
  trailers: IncomingHttpHeaders | undefined;
  data: Buffer;
  rstCode: number;
}

export const statusOf = (r: Reply): number => Number(r.trailers?.['grpc-status'] ?? r.headers['grpc-status']);
export const messageOf = (r: Reply): string => String(r.trailers?.['grpc-message'] ?? r.headers['grpc-message']);

/** The length-prefixed messages in a response body. */
export function messages(data: Buffer): Buffer[] {
  const out: Buffer[] = [];
  for (let at = 0; at < data.length; ) {
    const n = data.readUInt32BE(at + 1);
    out.push(data.subarray(at + 5, at + 5 + n));
    at += 5 + n;
  }
  return out;
}

export function reply(stream: ClientHttp2Stream): Promise<Reply> {
  return new Promise((resolve) => {
    const r: Reply = { headers: {}, trailers: undefined, data: Buffer.alloc(0), rstCode: 0 };
    stream.on('response', (h) => (r.headers = h));
    stream.on('trailers', (h) => (r.trailers = h));
    stream.on('data', (d: Buffer) => (r.data = Buffer.concat([r.data, d])));
    stream.on('error', () => {});
    stream.on('close', () => {
      r.rstCode = stream.rstCode ?? 0;
      resolve(r);
    });
  });
}

export const GRPC_HEADERS = { ':method': 'POST', 'content-type': 'application/grpc', te: 'trailers' };

export function open(session: ClientHttp2Session, path: string, headers: OutgoingHttpHeaders = {}): ClientHttp2Stream {
  return session.request({ ...GRPC_HEADERS, ':path': path, ...headers });
}

/** Writes `parts` one at a time, each flushed before the next, so the server sees them as separate DATA frames. */
export async function writeApart(stream: ClientHttp2Stream, parts: Buffer[]): Promise<void> {
  for (const p of parts) await new Promise<void>((resolve) => stream.write(p, () => resolve()));
}

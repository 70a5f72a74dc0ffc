import { createServer, type ServerHttp2Stream } from 'node:http2';
import { authorizationService, externalProcessorService } from '../../src/edge/envoy/protos.js';
import { allowCheckResponse, allowProcessingResponse } from './envoy-requests.js';
import { announceReady, exitWithParent } from './ipc.js';

/**
 * The floor of gRPC on node:http2: every stream answered with a gRPC reply encoded once at start (headers,
 * the allow message, OK trailers), the request's bytes read and dropped undecoded. What a gRPC door on
 * node:http2 costs before it decodes, decides or encodes anything.
 */

const port = Number(process.argv[2] ?? '0');

function framed(message: Buffer): Buffer {
  const out = Buffer.allocUnsafe(5 + message.length);
  out[0] = 0;
  out.writeUInt32BE(message.length, 1);
  message.copy(out, 5);
  return out;
}

const CHECK = authorizationService().service.Check!;
const PROCESS = externalProcessorService().service.Process!;
const REPLIES: Readonly<Record<string, Buffer>> = {
  [CHECK.path]: framed(CHECK.responseSerialize(allowCheckResponse(0))),
  [PROCESS.path]: framed(PROCESS.responseSerialize(allowProcessingResponse(0))),
};
const HEADERS = Object.freeze({ ':status': 200, 'content-type': 'application/grpc' });
const TRAILERS = Object.freeze({ 'grpc-status': '0' });
const WAIT_FOR_TRAILERS = Object.freeze({ waitForTrailers: true });

function sendTrailers(this: ServerHttp2Stream): void {
  this.sendTrailers(TRAILERS);
}

const server = createServer({ maxSessionMemory: Number.MAX_SAFE_INTEGER });
server.on('stream', (stream, headers) => {
  stream.on('error', () => {});
  const reply = REPLIES[headers[':path'] ?? ''];
  if (reply === undefined) return void stream.respond({ ':status': 404 }, { endStream: true });
  stream.resume();
  stream.on('end', () => {
    stream.respond(HEADERS, WAIT_FOR_TRAILERS);
    stream.once('wantTrailers', sendTrailers);
    stream.end(reply);
  });
});
server.listen(port, '127.0.0.1', () => announceReady({ port }));
exitWithParent();
process.once('SIGTERM', () => server.close(() => process.exit(0)));

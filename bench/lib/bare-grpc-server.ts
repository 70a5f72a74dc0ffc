import { Server, ServerCredentials, type sendUnaryData, type ServerDuplexStream, type ServerUnaryCall } from '@grpc/grpc-js';
import { authorizationService, externalProcessorService } from '../../src/edge/envoy/protos.js';
import { allowCheckResponse, allowProcessingResponse } from './envoy-requests.js';
import { announceReady, exitWithParent } from './ipc.js';

/** The gRPC baseline: the gateway's protos, loaded the same way, so messages are decoded and encoded exactly as there; it decides nothing. */

const port = Number(process.argv[2] ?? '0');
const CHECK = allowCheckResponse(0);
const PROCESS = allowProcessingResponse(0);

const server = new Server({ 'grpc.keepalive_permit_without_calls': 1, 'grpc.http2.min_ping_interval_without_data_ms': 5_000 });
server.addService(authorizationService().service, {
  Check(_call: ServerUnaryCall<object, object>, cb: sendUnaryData<object>): void {
    cb(null, CHECK);
  },
});
server.addService(externalProcessorService().service, {
  Process(call: ServerDuplexStream<object, object>): void {
    call.on('data', () => call.write(PROCESS));
    call.on('end', () => call.end());
    call.on('error', () => {});
  },
});
server.bindAsync(`127.0.0.1:${port}`, ServerCredentials.createInsecure(), (err, bound) => {
  if (err) throw err;
  announceReady({ port: bound });
});
exitWithParent();
process.once('SIGTERM', () => server.tryShutdown(() => process.exit(0)));

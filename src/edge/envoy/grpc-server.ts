import { Server, ServerCredentials } from '@grpc/grpc-js';
import { HealthImplementation } from 'grpc-health-check';
import type { Logger } from '../../observability/logger.js';
import type { Decider } from '../decider.js';
import type { DoorOptions } from '../headers.js';
import { extAuthzService } from './ext-authz.js';
import { extProcService } from './ext-proc.js';
import { authorizationService, externalProcessorService } from './protos.js';

/**
 * The gRPC listener: ext_authz, ext_proc and `grpc.health.v1.Health` on one port. Health reports
 * NOT_SERVING for the server ("") and both services until the drivers have synced, and again from the
 * start of a graceful shutdown.
 */

export const HEALTH_SERVICES = ['', 'envoy.service.auth.v3.Authorization', 'envoy.service.ext_proc.v3.ExternalProcessor'] as const;

export interface GrpcFrontDoor {
  readonly port: number;
  setServing(serving: boolean): void;
  close(graceMs: number): Promise<void>;
}

export async function startGrpcServer(
  decider: Decider,
  opts: { host: string; port: number; door: DoorOptions },
  log: Logger,
): Promise<GrpcFrontDoor> {
  const server = new Server({
    // Envoy keeps long-lived HTTP/2 connections to ext_authz/ext_proc and may ping them.
    'grpc.keepalive_permit_without_calls': 1,
    'grpc.http2.min_ping_interval_without_data_ms': 5_000,
  });
  server.addService(authorizationService().service, extAuthzService(decider, opts.door, log));
  server.addService(externalProcessorService().service, extProcService(decider, opts.door, log));
  const health = new HealthImplementation(Object.fromEntries(HEALTH_SERVICES.map((s) => [s, 'NOT_SERVING'])));
  health.addToServer(server);
  const host = opts.host.includes(':') ? `[${opts.host}]` : opts.host;
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(`${host}:${opts.port}`, ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return {
    port,
    setServing(serving) {
      for (const s of HEALTH_SERVICES) health.setStatus(s, serving ? 'SERVING' : 'NOT_SERVING');
    },
    close(graceMs) {
      // The gRPC twin of lib/http-listen.ts closeGracefully (`duplicates` pairs them): grpc-js has
      // tryShutdown/forceShutdown where node:http has close/closeAllConnections.
      return new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          server.forceShutdown();
          resolve();
        }, graceMs);
        timer.unref();
        server.tryShutdown(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    },
  };
}

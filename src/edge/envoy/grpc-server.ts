import { GrpcH2Server, type GrpcServerLimits } from '../../lib/grpc-h2-server.js';
import type { ServerTls } from '../../lib/http-listen.js';
import type { ConnectionGuard } from '../../lib/connection-guard.js';
import { HealthService } from '../../lib/grpc-health.js';
import type { Logger } from '../../observability/logger.js';
import type { Decider } from '../decider.js';
import type { DoorOptions } from '../headers.js';
import { checkMethod, extAuthzCheck } from './ext-authz.js';
import { extProcProcess, processMethod } from './ext-proc.js';

/**
 * The gRPC listener: ext_authz, ext_proc and `grpc.health.v1.Health` on one port, served by
 * lib/grpc-h2-server.ts on node:http2 rather than grpc-js's Server, whose per-call machinery costs
 * tens of µs of CPU per call on the hot path (docs/envoy.md). Health reports NOT_SERVING for the server ("")
 * and both services until the drivers have synced, and again from the start of a graceful shutdown.
 */

export const HEALTH_SERVICES = ['', 'envoy.service.auth.v3.Authorization', 'envoy.service.ext_proc.v3.ExternalProcessor'] as const;

export interface GrpcFrontDoor {
  readonly port: number;
  setServing(serving: boolean): void;
  close(graceMs: number): Promise<void>;
}

export async function startGrpcServer(
  decider: Decider,
  opts: { host: string; port: number; door: DoorOptions; limits: GrpcServerLimits; extProcMaxQueued: number; tls?: ServerTls; guard?: ConnectionGuard },
  log: Logger,
): Promise<GrpcFrontDoor> {
  const server = new GrpcH2Server({ onHandlerError: (err, path) => log.error({ err, path }, 'gRPC handler threw'), limits: opts.limits, tls: opts.tls, guard: opts.guard });
  server.addUnary(checkMethod(), extAuthzCheck(decider, opts.door, log));
  server.addBidi(processMethod(), extProcProcess(decider, opts.door, log, opts.extProcMaxQueued));
  const health = new HealthService(Object.fromEntries(HEALTH_SERVICES.map((s) => [s, 'NOT_SERVING'])));
  health.addTo(server);
  const port = await server.listen(opts.host, opts.port);
  return {
    port,
    setServing(serving) {
      for (const s of HEALTH_SERVICES) health.setStatus(s, serving ? 'SERVING' : 'NOT_SERVING');
    },
    close: (graceMs) => server.close(graceMs),
  };
}

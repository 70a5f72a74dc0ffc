import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { loadSync } from '@grpc/proto-loader';
import { GrpcStatus, type GrpcH2Server, type MethodDefinition, type ServerCall } from './grpc-h2-server.js';

/**
 * `grpc.health.v1.Health` (gRPC's health-checking protocol; its .proto as the grpc-health-check package ships it) on a
 * GrpcH2Server, with the semantics of grpc-health-check's HealthImplementation: Check answers a known
 * service's status and NOT_FOUND for any other; Watch sends the current status (SERVICE_UNKNOWN for an
 * unknown service) and then every change until the client goes away; List answers every status.
 */

export type ServingStatus = 'SERVING' | 'NOT_SERVING';

interface HealthCheckRequest {
  service: string;
}

interface HealthCheckResponse {
  status: ServingStatus | 'SERVICE_UNKNOWN';
}

interface HealthListResponse {
  statuses: Record<string, HealthCheckResponse>;
}

interface HealthMethods {
  Check: MethodDefinition<HealthCheckRequest, HealthCheckResponse>;
  Watch: MethodDefinition<HealthCheckRequest, HealthCheckResponse>;
  List: MethodDefinition<object, HealthListResponse>;
}

/** grpc-health-check's loader options; `defaults` makes an absent service name "" (the server as a whole). */
function healthMethods(): HealthMethods {
  const root = join(dirname(createRequire(import.meta.url).resolve('grpc-health-check')), '..', '..', 'proto');
  const pkg = loadSync('health/v1/health.proto', {
    keepCase: true,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
    includeDirs: [root],
  });
  return pkg['grpc.health.v1.Health'] as unknown as HealthMethods;
}

export class HealthService {
  private readonly statuses: Map<string, ServingStatus>;
  private readonly watchers = new Map<string, Set<ServerCall<HealthCheckRequest, HealthCheckResponse>>>();

  constructor(initial: Readonly<Record<string, ServingStatus>>) {
    this.statuses = new Map(Object.entries(initial));
  }

  /** Sets a service's status; watchers hear of it when it changes. */
  setStatus(service: string, status: ServingStatus): void {
    if (this.statuses.get(service) === status) return;
    this.statuses.set(service, status);
    for (const w of this.watchers.get(service) ?? []) w.write({ status });
  }

  addTo(server: GrpcH2Server): void {
    const methods = healthMethods();
    server.addUnary(methods.Check, (call) => {
      const status = this.statuses.get(call.request.service);
      if (status === undefined) call.fail(GrpcStatus.NOT_FOUND, `Health status unknown for service ${call.request.service}`);
      else call.end({ status });
    });
    server.addServerStreaming(methods.Watch, (call) => {
      const service = call.request.service;
      let set = this.watchers.get(service);
      if (set === undefined) this.watchers.set(service, (set = new Set()));
      const watchers = set;
      watchers.add(call);
      call.signal.addEventListener('abort', () => {
        watchers.delete(call);
        if (watchers.size === 0) this.watchers.delete(service);
      });
      call.write({ status: this.statuses.get(service) ?? 'SERVICE_UNKNOWN' });
    });
    server.addUnary(methods.List, (call) => {
      const statuses: Record<string, HealthCheckResponse> = {};
      for (const [service, status] of this.statuses) statuses[service] = { status };
      call.end({ statuses });
    });
  }
}

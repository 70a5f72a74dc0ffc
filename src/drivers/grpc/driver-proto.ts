import { join } from 'node:path';
import {
  loadPackageDefinition,
  makeGenericClientConstructor,
  type Client,
  type ClientReadableStream,
  type ClientUnaryCall,
  type GrpcObject,
  type Metadata,
  type CallOptions,
  type ServiceClientConstructor,
  type ServiceError,
} from '@grpc/grpc-js';
import { loadSync, type Options } from '@grpc/proto-loader';
import { packageRoot } from '../../lib/package-root.js';
import { decodeWatchEvent } from './watch-event-decoder.js';

/**
 * proto/sandgate/driver/v1/driver.proto, loaded at run time with @grpc/proto-loader, and the shapes its
 * messages take in JavaScript. The gateway (client) and the example driver (server) share this file so
 * both read the wire the same way.
 */

export const DRIVER_PROTO = 'sandgate/driver/v1/driver.proto';
export const DRIVER_SERVICE = 'sandgate.driver.v1.SandboxDriver';

/**
 * keepCase: field names as in the .proto, so docs and drivers in other languages spell them alike. Enums
 * as their names (an unknown number stays a number and is rejected), 64-bit integers as strings, no
 * defaults filled in (an unset message is distinguishable from an empty one), repeated fields always
 * arrays, and `oneofs` naming the member that is set.
 */
export const DRIVER_PROTO_OPTIONS: Options = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: false,
  arrays: true,
  oneofs: true,
};

/** The folder that holds `sandgate/driver/v1/driver.proto`: `proto/` in the package root. */
export function defaultProtoDir(): string {
  return join(packageRoot(), 'proto');
}

const loaded = new Map<string, ServiceClientConstructor>();

/** The SandboxDriver service: its `service` is the definition a server adds, and it is a client class. */
export function sandboxDriverService(protoDir: string = defaultProtoDir()): ServiceClientConstructor {
  let ctor = loaded.get(protoDir);
  if (ctor === undefined) {
    const pkg: GrpcObject = loadPackageDefinition(loadSync(DRIVER_PROTO, { ...DRIVER_PROTO_OPTIONS, includeDirs: [protoDir] }));
    let node: unknown = pkg;
    for (const part of DRIVER_SERVICE.split('.')) node = (node as Record<string, unknown>)[part];
    if (typeof node !== 'function') throw new Error(`proto service ${DRIVER_SERVICE} not found in ${protoDir}`);
    ctor = node as ServiceClientConstructor;
    loaded.set(protoDir, ctor);
  }
  return ctor;
}

const clients = new Map<string, ServiceClientConstructor>();

/**
 * The client class the gateway uses: the service above, with `WatchSandboxes` events read by the
 * hand-written decoder (watch-event-decoder.ts) instead of protobufjs's decode + toObject. Same objects.
 */
export function sandboxDriverClient(protoDir: string = defaultProtoDir()): ServiceClientConstructor {
  let ctor = clients.get(protoDir);
  if (ctor === undefined) {
    const service = sandboxDriverService(protoDir).service;
    const watch = service.WatchSandboxes;
    if (watch === undefined) throw new Error(`proto service ${DRIVER_SERVICE} in ${protoDir} has no WatchSandboxes`);
    ctor = makeGenericClientConstructor({ ...service, WatchSandboxes: { ...watch, responseDeserialize: decodeWatchEvent } }, DRIVER_SERVICE);
    clients.set(protoDir, ctor);
  }
  return ctor;
}

// Wire shapes. Every field is optional because proto3 omits defaults; the codec checks each one.

export interface WireTimestamp {
  /** int64 as a decimal string (longs: String); numbers are accepted when encoding. */
  readonly seconds?: string | number;
  readonly nanos?: number;
}

export type WireBackendState =
  | 'BACKEND_STATE_UNSPECIFIED'
  | 'BACKEND_STATE_STARTING'
  | 'BACKEND_STATE_READY'
  | 'BACKEND_STATE_PAUSED'
  | 'BACKEND_STATE_DELETING'
  | 'BACKEND_STATE_FAILED';

export type WireConditionStatus = 'CONDITION_STATUS_UNSPECIFIED' | 'CONDITION_STATUS_TRUE' | 'CONDITION_STATUS_FALSE' | 'CONDITION_STATUS_UNKNOWN';

export type WireSessionModel = 'SESSION_MODEL_REQUIRED' | 'SESSION_MODEL_NONE';

export interface WireCondition {
  readonly type?: string;
  readonly status?: WireConditionStatus | number;
  readonly reason?: string;
  readonly message?: string;
  readonly last_transition_time?: WireTimestamp | null;
}

export interface WireSandbox {
  readonly namespace?: string;
  readonly name?: string;
  readonly uid?: string;
  readonly resource_version?: string;
  readonly instance_id?: string;
  readonly ids?: readonly string[];
  readonly state?: WireBackendState | number;
  readonly conditions?: readonly WireCondition[];
  /** Which member of the `endpoint` oneof is set (filled in when decoding). */
  readonly endpoint?: 'addresses' | 'service_fqdn' | 'relay_only';
  readonly addresses?: { readonly addresses?: readonly string[] } | null;
  readonly service_fqdn?: string;
  readonly relay_only?: Record<string, never> | null;
  readonly session_model?: WireSessionModel | number;
  readonly ports?: readonly number[];
  readonly shutdown_time?: WireTimestamp | null;
  readonly revision?: { readonly desired?: string; readonly current?: string } | null;
  readonly created_at?: WireTimestamp | null;
  readonly envd_access_token?: string;
  /** google.protobuf.Duration, the same shape as a Timestamp. */
  readonly idle_timeout?: WireTimestamp | null;
  readonly wake_timeout?: WireTimestamp | null;
  readonly h2c_ports?: readonly number[];
  readonly public_ports?: readonly number[];
  readonly tcp_ports?: readonly number[];
  readonly access?: string;
}

export interface WireDeleted {
  readonly namespace?: string;
  readonly name?: string;
  readonly uid?: string;
  readonly resource_version?: string;
}

export interface WireWatchEvent {
  /** Which member of the `event` oneof is set (filled in when decoding). */
  readonly event?: 'snapshot' | 'synced' | 'upserted' | 'deleted' | 'batch';
  readonly snapshot?: WireSandbox | null;
  readonly synced?: Record<string, never> | null;
  readonly upserted?: WireSandbox | null;
  readonly deleted?: WireDeleted | null;
  readonly batch?: { readonly events?: readonly WireWatchEvent[] } | null;
}

export interface WireWatchRequest {
  readonly gateway_id?: string;
  /** The gateway reads `WatchEvent.batch` (driver.proto). */
  readonly accepts_batches?: boolean;
}

export interface WireSandboxRef {
  readonly namespace?: string;
  readonly name?: string;
}

type Unary<Req, Res> = (req: Req, metadata: Metadata, options: CallOptions, cb: (err: ServiceError | null, res?: Res) => void) => ClientUnaryCall;

/** The generated client's methods, typed (proto-loader builds them at run time). */
export interface SandboxDriverClient extends Client {
  WatchSandboxes(req: WireWatchRequest, metadata?: Metadata, options?: CallOptions): ClientReadableStream<WireWatchEvent>;
  Get: Unary<WireSandboxRef, WireSandbox>;
  Resume: Unary<WireSandboxRef, Record<string, never>>;
  Pause: Unary<WireSandboxRef, Record<string, never>>;
  ReportActivity: Unary<WireActivityReport, Record<string, never>>;
}

/** ActivityReport (driver.proto): a batch of sandboxes' last traffic. */
export interface WireActivityReport {
  readonly sandboxes: readonly {
    readonly namespace: string;
    readonly name: string;
    readonly last_activity: WireTimestamp;
    readonly ports: readonly { readonly port: number; readonly last_activity: WireTimestamp }[];
  }[];
}

import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { loadPackageDefinition, type GrpcObject, type ServiceClientConstructor, type ServiceDefinition } from '@grpc/grpc-js';
import { loadSync, type Options } from '@grpc/proto-loader';

/**
 * Envoy's own protos, loaded from @grpc/grpc-js-xds, which ships them with their whole import closure
 * (envoy-api, xds, googleapis, protoc-gen-validate). sandgate keeps no copy of Envoy's messages.
 */

const require = createRequire(import.meta.url);
const XDS_DEPS = join(dirname(require.resolve('@grpc/grpc-js-xds/package.json')), 'deps');

export const ENVOY_INCLUDE_DIRS: readonly string[] = ['envoy-api', 'xds', 'googleapis', 'protoc-gen-validate'].map((d) => join(XDS_DEPS, d));

/**
 * keepCase: field names as in the .proto (Envoy's docs and configs use snake_case). enums as strings,
 * 64-bit integers as strings, no default values filled in, and `oneofs` to name the chosen member.
 * Note: protobufjs supplies the google.protobuf well-known types itself, with camelCase field names
 * whatever keepCase says — a Struct value is `{stringValue: …}`, not `{string_value: …}`.
 */
export const PROTO_OPTIONS: Options = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: false,
  oneofs: true,
  includeDirs: [...ENVOY_INCLUDE_DIRS],
};

export const EXT_AUTHZ_PROTO = 'envoy/service/auth/v3/external_auth.proto';
export const EXT_PROC_PROTO = 'envoy/service/ext_proc/v3/external_processor.proto';

let loaded: GrpcObject | undefined;

function envoyPackage(): GrpcObject {
  loaded ??= loadPackageDefinition(loadSync([EXT_AUTHZ_PROTO, EXT_PROC_PROTO], PROTO_OPTIONS));
  return loaded;
}

function lookup(path: string): ServiceClientConstructor {
  let node: unknown = envoyPackage();
  for (const part of path.split('.')) node = (node as Record<string, unknown>)[part];
  if (typeof node !== 'function') throw new Error(`proto service ${path} not found`);
  return node as ServiceClientConstructor;
}

/** `envoy.service.auth.v3.Authorization` (ext_authz). Its `service` is the definition; it is also a client class. */
export function authorizationService(): ServiceClientConstructor {
  return lookup('envoy.service.auth.v3.Authorization');
}

/** `envoy.service.ext_proc.v3.ExternalProcessor` (ext_proc). */
export function externalProcessorService(): ServiceClientConstructor {
  return lookup('envoy.service.ext_proc.v3.ExternalProcessor');
}

export type { ServiceDefinition };

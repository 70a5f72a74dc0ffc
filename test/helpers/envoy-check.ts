import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { isDeepStrictEqual as same } from 'node:util';
import { loadSync } from '@grpc/proto-loader';
import { DEFAULTS } from '../../src/config/schema.js';
import { ROUTING_HEADERS } from '../../src/domain/route-key.js';
import { ENVOY_INCLUDE_DIRS } from '../../src/edge/envoy/protos.js';
import { UPSTREAM_PROTOCOL_HEADER } from '../../src/edge/headers.js';
import { AUTHZ_PREFIX, PATH_HEADER, SANDBOX_HEADER } from '../../src/edge/http-authz.js';
import { RELAY_AUTH_HEADER, RELAY_TARGET_HEADER } from '../../src/edge/relay/relay-headers.js';

/**
 * Checks of an Envoy configuration (envoy/*.yaml, and the same files in Kubernetes ConfigMaps). No Envoy runs here, so each file is checked twice:
 * against Envoy's own v3 protos (every field name, enum value, `@type` and duration, as Envoy's strict
 * loader would), and against sandgate's contract with Envoy (which filter runs when, which headers are
 * stripped, fail-closed, timeouts versus the readiness wait, where the upstream address comes from).
 * Every file in envoy/ is checked, so a new file is held to the same rules. The protos are the ones
 * @grpc/grpc-js-xds ships; their protoc-gen-validate rules (required fields, ranges) are not evaluated, so
 * `envoy --mode validate -c <file>` remains the last word where an Envoy binary is at hand.
 */

export const TYPE_URL = 'type.googleapis.com/';
export const T = {
  hcm: 'envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager',
  extAuthz: 'envoy.extensions.filters.http.ext_authz.v3.ExtAuthz',
  extProc: 'envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor',
  headerMutation: 'envoy.extensions.filters.http.header_mutation.v3.HeaderMutation',
  router: 'envoy.extensions.filters.http.router.v3.Router',
  httpOptions: 'envoy.extensions.upstreams.http.v3.HttpProtocolOptions',
} as const;
/** Headers only sandgate may set: a client copy is removed before the decision filter reads anything. */
const GATEWAY_HEADERS = [DEFAULTS.upstreamHeader, PATH_HEADER, SANDBOX_HEADER, RELAY_AUTH_HEADER, RELAY_TARGET_HEADER, UPSTREAM_PROTOCOL_HEADER];
/** The dynamic metadata namespace Envoy's ext_authz filter writes CheckResponse.dynamic_metadata into. */
export const EXT_AUTHZ_NAMESPACE = 'envoy.filters.http.ext_authz';

// ---- Plain-data access over parsed YAML ----

export type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
export const obj = (v: unknown): Obj => (isObj(v) ? v : {});
export const list = (v: unknown): unknown[] => (Array.isArray(v) ? v : []);
export const typeOf = (v: unknown): string | undefined => {
  const t = obj(v)['@type'];
  return typeof t === 'string' && t.startsWith(TYPE_URL) ? t.slice(TYPE_URL.length) : undefined;
};
export function walk(v: unknown, visit: (o: Obj) => void): void {
  if (Array.isArray(v)) for (const x of v) walk(x, visit);
  else if (isObj(v)) {
    visit(v);
    for (const x of Object.values(v)) walk(x, visit);
  }
}

/** A protobuf JSON Duration ("20s", "0.25s") in milliseconds. */
export function durationMs(v: unknown): number {
  const m = typeof v === 'string' ? /^(\d+)(\.\d{1,9})?s$/.exec(v) : null;
  if (m === null) throw new Error(`not a duration: ${JSON.stringify(v)}`);
  return Number(m[1]) * 1000 + Number(`0${m[2] ?? ''}`) * 1000;
}

// ---- Envoy's protos, as descriptors ----

interface FieldDesc { name: string; label: number; type: number; typeName?: string; oneofIndex?: number; options?: { deprecated?: boolean } }
interface MessageDesc { name: string; field?: FieldDesc[]; nestedType?: MessageDesc[]; enumType?: EnumDesc[]; options?: { mapEntry?: boolean } }
interface EnumDesc { name: string; value?: { name: string; number: number }[] }
interface Schema { messages: Map<string, MessageDesc>; enums: Map<string, EnumDesc> }

const LABEL_REPEATED = 3;
const TYPE_MESSAGE = 11;
const TYPE_ENUM = 14;
const TYPE_BOOL = 8;
const STRING_TYPES = new Set([9, 12]);
const INTEGER_TYPES = new Set([3, 4, 5, 6, 7, 13, 15, 16, 17, 18]);
const WRAPPERS: Readonly<Record<string, string>> = {
  'google.protobuf.BoolValue': 'boolean',
  'google.protobuf.StringValue': 'string',
  'google.protobuf.BytesValue': 'string',
  'google.protobuf.UInt32Value': 'number',
  'google.protobuf.Int32Value': 'number',
  'google.protobuf.UInt64Value': 'number',
  'google.protobuf.Int64Value': 'number',
  'google.protobuf.DoubleValue': 'number',
  'google.protobuf.FloatValue': 'number',
};

/** The directory of the proto package that declares a type, found under the include dirs. */
function packageDir(typeName: string): string {
  const parts = typeName.split('.');
  for (let n = parts.length - 1; n > 0; n--) {
    const rel = parts.slice(0, n).join('/');
    if (ENVOY_INCLUDE_DIRS.some((d) => existsSync(join(d, rel)))) return rel;
  }
  throw new Error(`no proto package for ${typeName}`);
}

/** Loads the bootstrap proto plus the package of every `@type` named in the configs. */
function loadSchema(typeNames: Iterable<string>): Schema {
  const files = new Set(['envoy/config/bootstrap/v3/bootstrap.proto']);
  for (const t of typeNames) {
    const rel = packageDir(t);
    for (const d of ENVOY_INCLUDE_DIRS) {
      if (existsSync(join(d, rel))) for (const f of readdirSync(join(d, rel))) if (f.endsWith('.proto')) files.add(`${rel}/${f}`);
    }
  }
  const def = loadSync([...files], { keepCase: true, includeDirs: [...ENVOY_INCLUDE_DIRS] });
  const fdp = def['google.protobuf.FileDescriptorProto'] as unknown as { deserialize(b: Buffer): unknown };
  const schema: Schema = { messages: new Map(), enums: new Map() };
  const seen = new Set<string>();
  const addMessage = (scope: string, m: MessageDesc): void => {
    const full = `${scope}.${m.name}`;
    schema.messages.set(full, m);
    for (const e of m.enumType ?? []) schema.enums.set(`${full}.${e.name}`, e);
    for (const n of m.nestedType ?? []) addMessage(full, n);
  };
  for (const entry of Object.values(def)) {
    for (const buf of (entry as { fileDescriptorProtos?: Buffer[] }).fileDescriptorProtos ?? []) {
      const file = fdp.deserialize(buf) as { name: string; package: string; messageType?: MessageDesc[]; enumType?: EnumDesc[] };
      if (seen.has(file.name)) continue;
      seen.add(file.name);
      for (const e of file.enumType ?? []) schema.enums.set(`${file.package}.${e.name}`, e);
      for (const m of file.messageType ?? []) addMessage(file.package, m);
    }
  }
  return schema;
}

/** Resolves a (possibly relative) type name the way protoc does: innermost enclosing scope first. */
function resolve(schema: Schema, scope: string, name: string): string | undefined {
  if (name.startsWith('.')) return name.slice(1);
  const parts = scope.split('.');
  for (let n = parts.length; n >= 0; n--) {
    const full = [...parts.slice(0, n), name].join('.');
    if (schema.messages.has(full) || schema.enums.has(full)) return full;
  }
  return undefined;
}

/** Checks a parsed YAML value against a message type with proto3 JSON rules; returns the problems. */
export function validate(schema: Schema, typeName: string, value: unknown, path = ''): string[] {
  const errors: string[] = [];
  const fail = (p: string, msg: string): void => void errors.push(`${p || '<root>'}: ${msg}`);
  const message = (type: string, v: unknown, p: string): void => {
    if (type in WRAPPERS) {
      if (typeof v !== WRAPPERS[type]) fail(p, `expected a ${WRAPPERS[type]} (${type})`);
      return;
    }
    switch (type) {
      case 'google.protobuf.Duration':
        if (typeof v !== 'string' || !/^\d+(\.\d{1,9})?s$/.test(v)) fail(p, `expected a duration like "20s", got ${JSON.stringify(v)}`);
        return;
      case 'google.protobuf.Struct':
        if (!isObj(v)) fail(p, 'expected an object (Struct)');
        return;
      case 'google.protobuf.Value':
        return;
      case 'google.protobuf.Any': {
        const inner = typeOf(v);
        if (inner === undefined) return fail(p, 'Any without a type.googleapis.com/ @type');
        if (!schema.messages.has(inner)) return fail(p, `unknown @type ${inner}`);
        const rest = { ...obj(v) };
        delete rest['@type'];
        return message(inner, rest, p);
      }
    }
    const desc = schema.messages.get(type);
    if (desc === undefined) return fail(p, `unknown message type ${type}`);
    if (!isObj(v)) return fail(p, `expected an object (${type})`);
    const oneofs = new Map<number, string>();
    for (const [key, fv] of Object.entries(v)) {
      const fp = p ? `${p}.${key}` : key;
      const field = desc.field?.find((f) => f.name === key);
      if (field === undefined) {
        fail(fp, `unknown field of ${type}`);
        continue;
      }
      if (field.options?.deprecated === true) fail(fp, 'deprecated field');
      if (field.oneofIndex !== undefined) {
        const other = oneofs.get(field.oneofIndex);
        if (other !== undefined) fail(fp, `shares a oneof with ${other}`);
        oneofs.set(field.oneofIndex, key);
      }
      const ft = field.typeName === undefined || field.typeName === '' ? undefined : resolve(schema, type, field.typeName);
      const entry = ft === undefined ? undefined : schema.messages.get(ft);
      if (field.label === LABEL_REPEATED && entry?.options?.mapEntry === true) {
        const valueField = entry.field?.find((f) => f.name === 'value');
        if (!isObj(fv) || valueField === undefined) fail(fp, 'expected a map');
        else for (const [k, item] of Object.entries(fv)) single(valueField, ft!, item, `${fp}.${k}`);
      } else if (field.label === LABEL_REPEATED) {
        if (!Array.isArray(fv)) fail(fp, 'expected a list');
        else fv.forEach((item, i) => single(field, type, item, `${fp}[${i}]`));
      } else single(field, type, fv, fp);
    }
  };
  const single = (field: FieldDesc, scope: string, v: unknown, p: string): void => {
    if (field.type === TYPE_MESSAGE || field.type === TYPE_ENUM) {
      const t = resolve(schema, scope, field.typeName ?? '');
      if (t === undefined) return fail(p, `unresolved type ${field.typeName}`);
      if (field.type === TYPE_MESSAGE) return message(t, v, p);
      const names = schema.enums.get(t)?.value?.map((e) => e.name) ?? [];
      if (!(typeof v === 'string' && names.includes(v)) && !Number.isInteger(v)) fail(p, `expected one of ${names.join(', ')}`);
    } else if (field.type === TYPE_BOOL) {
      if (typeof v !== 'boolean') fail(p, 'expected a boolean');
    } else if (STRING_TYPES.has(field.type)) {
      if (typeof v !== 'string') fail(p, 'expected a string');
    } else if (INTEGER_TYPES.has(field.type)) {
      if (!Number.isInteger(v) && !(typeof v === 'string' && /^-?\d+$/.test(v))) fail(p, 'expected an integer');
    } else if (typeof v !== 'number') fail(p, 'expected a number');
  };
  message(typeName, value, path);
  return errors;
}

// ---- sandgate's contract with Envoy ----

const clustersOf = (doc: unknown): Obj[] => list(obj(obj(doc).static_resources).clusters).map(obj);
export const clusterNamed = (doc: unknown, name: unknown): Obj | undefined => clustersOf(doc).find((c) => c.name === name);
export const socketAddresses = (c: Obj): Obj[] =>
  list(obj(c.load_assignment).endpoints).flatMap((e) => list(obj(e).lb_endpoints).map((l) => obj(obj(obj(obj(l).endpoint).address).socket_address)));
const exactPatterns = (matcher: unknown): unknown[] => list(obj(matcher).patterns).map((p) => obj(p).exact);
const defaultThresholds = (c: Obj | undefined): Obj => obj(list(obj(c?.circuit_breakers).thresholds)[0]);
/**
 * ext_proc's processing_mode for a headers-only processor: a body mode other than NONE breaks upgrades;
 * response headers are sent so sandgate drops a sandbox's Set-Cookie of its session cookie.
 */
const HEADERS_ONLY = {
  request_header_mode: 'SEND',
  response_header_mode: 'SEND',
  request_body_mode: 'NONE',
  response_body_mode: 'NONE',
  request_trailer_mode: 'SKIP',
  response_trailer_mode: 'SKIP',
};
const isDecision = (f: Obj): boolean => typeOf(f.typed_config) === T.extAuthz || typeOf(f.typed_config) === T.extProc;
/** Request headers removed by the header_mutation filters among `filters`. */
const removedBy = (filters: readonly Obj[]): unknown[] =>
  filters
    .filter((f) => typeOf(f.typed_config) === T.headerMutation)
    .flatMap((f) => list(obj(obj(f.typed_config).mutations).request_mutations).map((m) => obj(m).remove));

export function connectionManagers(doc: unknown): Obj[] {
  const out: Obj[] = [];
  walk(doc, (o) => {
    if (typeOf(o) === T.hcm) out.push(o);
  });
  return out;
}

function waitLimitMs(v: unknown): number {
  try {
    return durationMs(v);
  } catch {
    return Number.NaN;
  }
}

/**
 * Everything in `doc` that breaks sandgate's contract with Envoy, as sentences; empty when the file is
 * right. `file` names the shape: `edge-*` (port 8080, sandgate replicas by DNS) or `sidecar-*` (port 10000,
 * the replica on loopback).
 */
export function contractProblems(file: string, doc: unknown): string[] {
  const out: string[] = [];
  const need = (ok: boolean, problem: string): void => {
    if (!ok) out.push(problem);
  };
  const edge = file.startsWith('edge-');
  need(/^(edge|sidecar)-[a-z0-9-]+\.yaml$/.test(file), 'file name must start with edge- or sidecar-');

  const admin = obj(obj(obj(doc).admin).address).socket_address;
  need(same(admin, { address: '127.0.0.1', port_value: 9901 }), 'Envoy admin must listen on 127.0.0.1:9901 only');
  const ports = list(obj(obj(doc).static_resources).listeners).map((l) => obj(obj(obj(l).address).socket_address).port_value);
  need(same(ports, [edge ? 8080 : 10000]), `one listener on port ${edge ? 8080 : 10000}`);
  const hcms = connectionManagers(doc);
  need(hcms.length === 1, 'exactly one http_connection_manager');
  const hcm = hcms[0] ?? {};

  // The filter chain: strip → decide → route.
  const filters = list(hcm.http_filters).map(obj);
  const decisionAt = filters.findIndex(isDecision);
  need(filters.filter(isDecision).length === 1, 'exactly one ext_authz or ext_proc filter');
  need(typeOf(filters.at(-1)?.typed_config) === T.router, 'the router filter must be last');
  const decision = obj(filters[decisionAt]?.typed_config);
  const proc = typeOf(decision) === T.extProc;
  const http = isObj(decision.http_service);
  need(decision.failure_mode_allow === false, 'the decision filter must fail closed (failure_mode_allow: false)');
  if (!proc && !http) need(decision.transport_api_version === 'V3', 'gRPC ext_authz must set transport_api_version: V3');
  const server = obj(obj(decision.http_service).server_uri);
  const limit = proc ? decision.message_timeout : http ? server.timeout : obj(decision.grpc_service).timeout;
  need(waitLimitMs(limit) > DEFAULTS.readinessWaitMs, `the decision timeout (${String(limit)}) must exceed the readiness wait (${DEFAULTS.readinessWaitMs} ms)`);
  if (proc) need(waitLimitMs(limit) <= 3_600_000, 'ext_proc message_timeout is at most 3600s');

  const before = decisionAt < 0 ? [] : removedBy(filters.slice(0, decisionAt));
  for (const h of GATEWAY_HEADERS) need(before.includes(h), `${h} must be removed by a header_mutation filter before the decision filter`);
  for (const h of ROUTING_HEADERS) need(!before.includes(h), `${h} is a route key sandgate reads: it must not be removed before the decision filter`);
  const routeConfig = obj(hcm.route_config);
  const after = [
    ...(decisionAt < 0 ? [] : removedBy(filters.slice(decisionAt + 1))),
    ...list(routeConfig.request_headers_to_remove),
    ...list(routeConfig.virtual_hosts).flatMap((vh) => list(obj(vh).request_headers_to_remove)),
  ];
  for (const h of ROUTING_HEADERS) need(after.includes(h), `${h} must be removed before the request reaches the sandbox`);

  // The connection manager and the route to the sandboxes.
  need(list(hcm.upgrade_configs).some((u) => obj(u).upgrade_type === 'websocket'), 'WebSocket upgrades must be on');
  need(hcm.use_remote_address === true && hcm.xff_num_trusted_hops === 0, 'use_remote_address: true and xff_num_trusted_hops: 0');
  const routes = list(routeConfig.virtual_hosts).flatMap((vh) => list(obj(vh).routes)).map(obj);
  need(routes.length > 0, 'at least one route');
  for (const r of routes) {
    const action = obj(r.route);
    const target = clusterNamed(doc, action.cluster);
    const name = String(action.cluster);
    need(target?.type === 'ORIGINAL_DST' && target.lb_policy === 'CLUSTER_PROVIDED', `route cluster ${name} must be ORIGINAL_DST/CLUSTER_PROVIDED`);
    need(waitLimitMs(action.timeout) === 0, 'the sandbox route must have timeout: 0s (streams have no deadline)');
    need(Number(defaultThresholds(target).max_connections) > 1024, `${name} must raise Envoy’s default 1024-connection circuit breaker`);
    const lb = obj(target?.original_dst_lb_config);
    if (lb.metadata_key !== undefined) {
      need(lb.use_http_header === undefined, 'metadata routing must not fall back to a header');
      need(!proc && !http, 'metadata routing needs gRPC ext_authz (CheckResponse.dynamic_metadata)');
      const key = { key: EXT_AUTHZ_NAMESPACE, path: [{ key: 'upstream' }] };
      need(same(lb.metadata_key, key), `metadata_key must be ${EXT_AUTHZ_NAMESPACE} / upstream`);
    } else {
      const header = lb.use_http_header === true && lb.http_header_name === DEFAULTS.upstreamHeader;
      need(header, `header routing must read ${DEFAULTS.upstreamHeader}`);
    }
  }

  // h2c ports: the route that matches sandgate's `x-sandgate-upstream-protocol: h2c` comes before the
  // catch-all and reaches a cluster that speaks HTTP/2; every other sandbox route speaks HTTP/1.1.
  const h2cAt = routes.findIndex(isH2cRoute);
  const catchAll = routes.findIndex((r) => obj(r.match).headers === undefined);
  need(h2cAt >= 0, `a route matching ${UPSTREAM_PROTOCOL_HEADER}: h2c must send h2c ports to an HTTP/2 cluster`);
  need(h2cAt < 0 || catchAll < 0 || h2cAt < catchAll, 'the h2c route must come before the catch-all route');
  for (const r of routes) {
    const cluster = clusterNamed(doc, obj(r.route).cluster);
    const speaks = Object.keys(obj(obj(obj(cluster?.typed_extension_protocol_options)[T.httpOptions]).explicit_http_config));
    // Over TLS the protocol is also what ALPN offers: the relay listener serves HTTP/2 to a client that offered h2.
    const tls = obj(obj(cluster?.transport_socket).typed_config);
    const alpn = tls.common_tls_context === undefined ? undefined : list(obj(tls.common_tls_context).alpn_protocols);
    const name = String(obj(r.route).cluster);
    if (isH2cRoute(r)) {
      need(same(speaks, ['http2_protocol_options']), `the h2c route's cluster must set explicit_http_config.http2_protocol_options`);
      need(alpn === undefined || same(alpn, ['h2']), `the h2c route's cluster ${name} must offer ALPN h2 alone over TLS`);
    } else {
      need(!speaks.includes('http2_protocol_options'), `route cluster ${name} must not speak HTTP/2 to an HTTP/1.1 port`);
      need(alpn === undefined || !alpn.includes('h2'), `route cluster ${name} must not offer ALPN h2 for an HTTP/1.1 port`);
    }
  }
  // A relay decision for an h2c port carries both headers: a relay route that catches it first would speak
  // HTTP/1.1 to it, so the relay h2c route must come before every other relay route.
  const relayAt = routes.findIndex((r) => isRelayRoute(r) && !isH2cRoute(r));
  if (relayAt >= 0) {
    const relayH2cAt = routes.findIndex((r) => isRelayRoute(r) && isH2cRoute(r));
    need(relayH2cAt >= 0 && relayH2cAt < relayAt, `a route matching ${RELAY_TARGET_HEADER} and ${UPSTREAM_PROTOCOL_HEADER}: h2c must come before the relay route`);
  }
  // ext_authz picks the route before the check; only clear_route_cache re-picks it on sandgate's headers.
  if (!proc) need(decision.clear_route_cache === true, 'ext_authz must set clear_route_cache: true (the h2c and relay routes match on headers sandgate sets)');

  // The sandgate cluster.
  const sandgateName = http ? server.cluster : obj(obj(decision.grpc_service).envoy_grpc).cluster_name;
  const sandgate = clusterNamed(doc, sandgateName);
  need(sandgate !== undefined, `the decision filter's cluster ${String(sandgateName)} must exist`);
  const endpoint = { address: edge ? 'sandgate' : '127.0.0.1', port_value: http ? DEFAULTS.adminPort : DEFAULTS.grpcPort };
  need(same(socketAddresses(sandgate ?? {}), [endpoint]), `sandgate must be reached at ${endpoint.address}:${endpoint.port_value}`);
  need(sandgate?.type === (edge ? 'STRICT_DNS' : 'STATIC'), `the sandgate cluster must be ${edge ? 'STRICT_DNS' : 'STATIC'}`);
  need(waitLimitMs(sandgate?.connect_timeout) > 0, 'the sandgate cluster needs a connect_timeout');
  const protocol = obj(obj(obj(sandgate?.typed_extension_protocol_options)[T.httpOptions]).explicit_http_config);
  const expected = http ? 'http_protocol_options' : 'http2_protocol_options';
  need(same(Object.keys(protocol), [expected]), `sandgate speaks ${http ? 'HTTP/1.1' : 'HTTP/2 (gRPC)'}: explicit_http_config.${expected}`);
  const check = obj(list(sandgate?.health_checks)[0]);
  if (http) need(obj(check.http_health_check).path === '/readyz', 'the HTTP sandgate cluster is health-checked on /readyz');
  else need(same(check.grpc_health_check, {}), 'the gRPC sandgate cluster is health-checked with grpc.health.v1');
  const t = defaultThresholds(sandgate);
  const room = [t.max_requests, t.max_pending_requests, ...(http ? [t.max_connections] : [])];
  need(
    room.every((n) => Number(n) >= DEFAULTS.waitersTotal),
    `the sandgate cluster's circuit breakers must admit waitersTotal (${DEFAULTS.waitersTotal}) waiting requests`,
  );

  // Per decision filter.
  if (proc) {
    need(same(decision.processing_mode, HEADERS_ONLY), 'ext_proc must send request and response headers only (body modes NONE)');
    need(decision.allow_mode_override === false, 'ext_proc must not let the processor change the processing mode');
    const rules = obj(decision.mutation_rules);
    need(
      rules.disallow_all !== true && rules.disallow_system !== true && rules.disallow_expression === undefined,
      'ext_proc mutation_rules must let sandgate set :path and the upstream header',
    );
    need(decision.forward_rules === undefined, 'ext_proc must forward every header (the route keys among them)');
  } else if (http) {
    const service = obj(decision.http_service);
    need(service.path_prefix === AUTHZ_PREFIX, `http_service.path_prefix must be ${AUTHZ_PREFIX}`);
    const allowed = exactPatterns(decision.allowed_headers);
    need([...ROUTING_HEADERS, 'accept'].every((h) => allowed.includes(h)), 'HTTP ext_authz must forward the route-key headers and accept');
    need(['x-api-key', 'e2b-traffic-access-token', 'x-access-token', 'cookie'].every((h) => allowed.includes(h)), 'HTTP ext_authz must forward the credentials sandgate checks (signed links: the cookie)');
    const upstream = exactPatterns(obj(service.authorization_response).allowed_upstream_headers);
    need(GATEWAY_HEADERS.every((h) => upstream.includes(h)), 'HTTP ext_authz must copy sandgate’s headers onto the request');
    need(upstream.includes('cookie'), 'HTTP ext_authz must let sandgate replace the cookie header (its link cookie taken out)');
  } else {
    need(decision.allowed_headers === undefined, 'gRPC ext_authz must forward every header (the route keys among them)');
    need(decision.with_request_body === undefined, 'ext_authz must not buffer bodies (breaks streaming and upgrades)');
  }
  return out;
}

/** A route that matches exactly `x-sandgate-upstream-protocol: h2c`. */
function isH2cRoute(r: Obj): boolean {
  return list(obj(r.match).headers).some((h) => obj(h).name === UPSTREAM_PROTOCOL_HEADER && same(obj(h).string_match, { exact: 'h2c' }));
}

/** A route that matches on the relay target header sandgate sets on a relay decision. */
function isRelayRoute(r: Obj): boolean {
  return list(obj(r.match).headers).some((h) => obj(h).name === RELAY_TARGET_HEADER);
}

// ---- One entry point for the proto check ----

export const BOOTSTRAP = 'envoy.config.bootstrap.v3.Bootstrap';

let schemaCache: { types: Set<string>; schema: Schema } | undefined;

/** Envoy's protos for the bootstrap and every `@type` in `docs`, loaded again only when a new type appears. */
export function envoySchema(...docs: unknown[]): Schema {
  const types = new Set(schemaCache?.types ?? []);
  for (const doc of docs) {
    walk(doc, (o) => {
      const t = typeOf(o);
      if (t !== undefined) types.add(t);
    });
  }
  if (schemaCache === undefined || types.size !== schemaCache.types.size) schemaCache = { types, schema: loadSchema(types) };
  return schemaCache.schema;
}

/** Every field, enum, duration and `@type` in `doc` that Envoy's v3 protos do not have; empty when valid. */
export function envoyProtoProblems(doc: unknown): string[] {
  return validate(envoySchema(doc), BOOTSTRAP, doc);
}

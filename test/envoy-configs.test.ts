import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import {
  connectionManagers,
  contractProblems,
  durationMs,
  envoyProtoProblems,
  EXT_AUTHZ_NAMESPACE,
  list,
  obj,
  socketAddresses,
  TYPE_URL,
  type Obj,
} from './helpers/envoy-check.js';

/**
 * The shipped Envoy configurations (envoy/*.yaml). No Envoy runs here, so each file is checked twice:
 * against Envoy's own v3 protos (every field name, enum value, `@type` and duration, as Envoy's strict
 * loader would), and against sandgate's contract with Envoy (which filter runs when, which headers are
 * stripped, fail-closed, timeouts versus the readiness wait, where the upstream address comes from).
 * Every file in envoy/ is checked, so a new file is held to the same rules. The protos are the ones
 * @grpc/grpc-js-xds ships; their protoc-gen-validate rules (required fields, ranges) are not evaluated, so
 * `envoy --mode validate -c <file>` remains the last word where an Envoy binary is at hand.
 */

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const ENVOY_DIR = join(ROOT, 'envoy');
const FILES = readdirSync(ENVOY_DIR).filter((f) => f.endsWith('.yaml')).sort();

// ---- Tests ----

const CONFIGS = FILES.map((file) => ({ file, doc: parse(readFileSync(join(ENVOY_DIR, file), 'utf8')) as unknown }));

/** An edit to a copy of a shipped file: the live filter and cluster arrays, so it can reorder or extend them. */
type Edit = (doc: Obj, filters: Obj[], clusters: Obj[]) => void;
const hcmOf = (doc: Obj): Obj => connectionManagers(doc)[0] ?? {};
const firstRoute = (doc: Obj): Obj => obj(obj(list(obj(list(obj(hcmOf(doc).route_config).virtual_hosts)[0]).routes)[0]).route);
const routesOf = (doc: Obj): unknown[] => list(obj(list(obj(hcmOf(doc).route_config).virtual_hosts)[0]).routes);
const lbConfig = (c: Obj | undefined): Obj => obj(c?.original_dst_lb_config);

function edited(file: string, edit: Edit): unknown {
  const base = CONFIGS.find((c) => c.file === file);
  if (base === undefined) throw new Error(`no ${file}`);
  const doc = structuredClone(base.doc) as Obj;
  edit(doc, list(connectionManagers(doc)[0]?.http_filters) as Obj[], list(obj(doc.static_resources).clusters) as Obj[]);
  return doc;
}
const typed = (f: Obj | undefined): Obj => obj(f?.typed_config);

describe('durationMs', () => {
  it.each([
    ['20s', 20_000],
    ['0s', 0],
    ['0.25s', 250],
    ['1.5s', 1500],
  ])('%s is %i ms', (text, ms) => expect(durationMs(text)).toBe(ms));
  it.each(['20', '20ms', '1m', '', 20])('rejects %j', (bad) => expect(() => durationMs(bad)).toThrow(/not a duration/));
});

describe.each(CONFIGS)('envoy/$file', ({ file, doc }) => {
  it('is a valid Envoy v3 bootstrap: every field, enum, duration and @type exists in Envoy’s protos', () => {
    expect(envoyProtoProblems(doc)).toEqual([]);
  });
  it('keeps sandgate’s contract: strip, decide fail-closed, route to the upstream sandgate chose', () => {
    expect(contractProblems(file, doc)).toEqual([]);
  });
});

describe('the proto check rejects', () => {
  it.each<[string, Edit, RegExp]>([
    ['a misspelt field', (_d, _f, c) => void (c[0]!.conect_timeout = '1s'), /conect_timeout: unknown field/],
    ['a misspelt field inside a typed_config', (_d, f) => void (typed(f[1]).failure_mode_alow = false), /failure_mode_alow: unknown field/],
    ['an enum value Envoy does not have', (_d, _f, c) => void (c[0]!.lb_policy = 'ROUNDROBIN'), /lb_policy: expected one of/],
    ['a duration in milliseconds', (_d, _f, c) => void (c[0]!.connect_timeout = '1000ms'), /connect_timeout: expected a duration/],
    ['an unknown @type', (_d, f) => void (f[0]!.typed_config = { '@type': `${TYPE_URL}envoy.Nope` }), /unknown @type envoy\.Nope/],
    ['a scalar where a list belongs', (_d, _f, c) => void (c[0]!.health_checks = {}), /health_checks: expected a list/],
    ['two members of one oneof', (d) => void (hcmOf(d).rds = { route_config_name: 'x' }), /shares a oneof/],
    [
      'a deprecated field',
      (_d, f) => void (typed(f[1]).http_service = { authorization_request: { allowed_headers: { patterns: [] } } }),
      /allowed_headers: deprecated field/,
    ],
  ])('%s', (_name, edit, problem) => {
    expect(envoyProtoProblems(edited('edge-ext-authz-metadata.yaml', edit)).join('\n')).toMatch(problem);
  });
});

describe('the contract check rejects', () => {
  it.each<[string, string, Edit, RegExp]>([
    ['failing open', 'edge-ext-authz-metadata.yaml', (_d, f) => void (typed(f[1]).failure_mode_allow = true), /fail closed/],
    [
      'a timeout equal to the readiness wait',
      'edge-ext-authz-header.yaml',
      (_d, f) => void (obj(typed(f[1]).grpc_service).timeout = '15s'),
      /must exceed the readiness wait/,
    ],
    ['ext_proc on Envoy’s 200 ms default', 'edge-ext-proc.yaml', (_d, f) => void delete typed(f[1]).message_timeout, /must exceed the readiness wait/],
    [
      'the strip filter after the decision',
      'edge-ext-authz-header.yaml',
      (_d, f) => void f.splice(0, 2, f[1]!, f[0]!),
      /x-sandgate-upstream must be removed by a header_mutation filter before/,
    ],
    [
      'stripping a route key before the decision',
      'edge-ext-proc.yaml',
      (_d, f) => void list(obj(typed(f[0]).mutations).request_mutations).push({ remove: 'e2b-sandbox-id' }),
      /e2b-sandbox-id is a route key/,
    ],
    [
      'forwarding route keys to the sandbox',
      'sidecar-ext-authz.yaml',
      (d) => void delete obj(hcmOf(d).route_config).request_headers_to_remove,
      /x-sandbox-id must be removed before the request reaches/,
    ],
    [
      'routing on Envoy’s own header',
      'edge-ext-authz-header.yaml',
      (_d, _f, c) => void (lbConfig(c[1]).http_header_name = 'x-envoy-original-dst-host'),
      /must read x-sandgate-upstream/,
    ],
    [
      'a metadata key in the wrong namespace',
      'edge-ext-authz-metadata.yaml',
      (_d, _f, c) => void (obj(lbConfig(c[1]).metadata_key).key = 'sandgate'),
      /metadata_key must be/,
    ],
    [
      'metadata routing with a header fallback',
      'sidecar-ext-authz.yaml',
      (_d, _f, c) => void (lbConfig(c[1]).use_http_header = true),
      /must not fall back to a header/,
    ],
    [
      'metadata routing behind ext_proc',
      'edge-ext-proc.yaml',
      (_d, _f, c) => void (c[1]!.original_dst_lb_config = { metadata_key: { key: EXT_AUTHZ_NAMESPACE, path: [{ key: 'upstream' }] } }),
      /needs gRPC ext_authz/,
    ],
    [
      'an ext_proc body mode',
      'sidecar-ext-proc.yaml',
      (_d, f) => void (obj(typed(f[1]).processing_mode).request_body_mode = 'STREAMED'),
      /request and response headers only/,
    ],
    [
      'an ext_proc that skips response headers (a sandbox\'s Set-Cookie of sandgate\'s cookie would pass)',
      'edge-ext-proc.yaml',
      (_d, f) => void (obj(typed(f[1]).processing_mode).response_header_mode = 'SKIP'),
      /request and response headers only/,
    ],
    [
      'a client-sent protocol header reaching the decision',
      'sidecar-ext-proc.yaml',
      (_d, f) => void list(obj(typed(f[0]).mutations).request_mutations).pop(),
      /x-sandgate-upstream-protocol must be removed by a header_mutation filter before/,
    ],
    ['no h2c route', 'edge-ext-authz-header.yaml', (d) => void routesOf(d).splice(0, 1), /a route matching x-sandgate-upstream-protocol: h2c/],
    ['the h2c route after the catch-all', 'edge-ext-proc.yaml', (d) => void routesOf(d).push(routesOf(d).shift()), /h2c route must come before the catch-all/],
    [
      'an h2c cluster that speaks HTTP/1.1',
      'edge-ext-authz-metadata.yaml',
      (_d, _f, c) => void delete c.find((x) => x.name === 'sandbox_upstream_h2c')!.typed_extension_protocol_options,
      /h2c route's cluster must set explicit_http_config.http2_protocol_options/,
    ],
    [
      'HTTP/2 to every sandbox port',
      'sidecar-ext-authz.yaml',
      (_d, _f, c) => void (c.find((x) => x.name === 'sandbox_upstream')!.typed_extension_protocol_options = c.find((x) => x.name === 'sandbox_upstream_h2c')!.typed_extension_protocol_options),
      /sandbox_upstream must not speak HTTP\/2/,
    ],
    ['no relay h2c route', 'edge-ext-authz-mtls.yaml', (d) => void routesOf(d).splice(0, 1), /must come before the relay route/],
    ['the relay h2c route after the relay route', 'edge-ext-authz-mtls.yaml', (d) => void routesOf(d).splice(0, 2, routesOf(d)[1], routesOf(d)[0]), /must come before the relay route/],
    [
      'the relay h2c cluster offering ALPN http/1.1',
      'edge-ext-authz-mtls.yaml',
      (_d, _f, c) => void (obj(obj(obj(c.find((x) => x.name === 'relay_upstream_h2c')!.transport_socket).typed_config).common_tls_context).alpn_protocols = ['http/1.1']),
      /relay_upstream_h2c must offer ALPN h2 alone/,
    ],
    [
      'the HTTP/1.1 relay cluster offering ALPN h2',
      'edge-ext-authz-mtls.yaml',
      (_d, _f, c) => void (obj(obj(obj(c.find((x) => x.name === 'relay_upstream')!.transport_socket).typed_config).common_tls_context).alpn_protocols = ['h2', 'http/1.1']),
      /relay_upstream must not offer ALPN h2/,
    ],
    ['ext_authz keeping the route picked before the check', 'edge-ext-authz-mtls.yaml', (_d, f) => void delete typed(f[1]).clear_route_cache, /clear_route_cache: true/],
    [
      'HTTP authz not copying the protocol header',
      'edge-ext-authz-http.yaml',
      (_d, f) => {
        const patterns = list(obj(obj(obj(typed(f[1]).http_service).authorization_response).allowed_upstream_headers).patterns);
        patterns.splice(patterns.findIndex((p) => obj(p).exact === 'x-sandgate-upstream-protocol'), 1);
      },
      /copy sandgate’s headers/,
    ],
    ['a route deadline', 'edge-ext-authz-http.yaml', (d) => void (firstRoute(d).timeout = '15s'), /timeout: 0s/],
    ['no WebSocket upgrades', 'edge-ext-proc.yaml', (d) => void delete hcmOf(d).upgrade_configs, /WebSocket/],
    ['the router not last', 'edge-ext-authz-metadata.yaml', (_d, f) => void f.push(f.shift()!), /router filter must be last/],
    [
      'sandgate on the wrong port',
      'edge-ext-authz-metadata.yaml',
      (_d, _f, c) => void (socketAddresses(c[0]!)[0]!.port_value = 9002),
      /sandgate must be reached at sandgate:9001/,
    ],
    ['a sandgate cluster without health checks', 'sidecar-ext-proc.yaml', (_d, _f, c) => void delete c[0]!.health_checks, /health-checked/],
    ['Envoy’s default circuit breakers on sandgate', 'edge-ext-authz-http.yaml', (_d, _f, c) => void delete c[0]!.circuit_breakers, /admit waitersTotal/],
    [
      'HTTP authz without the e2b route keys',
      'edge-ext-authz-http.yaml',
      (_d, f) => void list(obj(typed(f[1]).allowed_headers).patterns).splice(3, 2),
      /forward the route-key headers/,
    ],
  ])('%s (%s)', (_name, file, edit, problem) => {
    expect(contractProblems(file, edited(file, edit)).join('\n')).toMatch(problem);
  });
});

describe('the envoy/ folder', () => {
  it('ships the edge and sidecar configurations, and both docs list every file', () => {
    expect(FILES).toEqual(expect.arrayContaining(['edge-ext-authz-metadata.yaml', 'edge-ext-authz-header.yaml', 'edge-ext-proc.yaml', 'sidecar-ext-authz.yaml']));
    const readme = readFileSync(join(ENVOY_DIR, 'README.md'), 'utf8');
    const guide = readFileSync(join(ROOT, 'docs', 'envoy.md'), 'utf8');
    for (const f of FILES) {
      expect(readme, f).toContain(f);
      expect(guide, f).toContain(f);
    }
  });
});

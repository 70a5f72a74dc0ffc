import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config/load.js';
import { tracingSettings } from '../../src/config/tracing-settings.js';
import { AddressSet } from '../../src/lib/address-set.js';
import { createExporter } from '../../src/observability/otel-exporter.js';
import { expectSandgateError } from '../helpers/sandgate-error.js';

/**
 * The tracing options: the OpenTelemetry SDK's standard `OTEL_*` variables read through the schema (an
 * empty one unset, enumerated values case-insensitive), the specification's endpoint rules and
 * signal-specific precedence, a `config_invalid` naming the variable for every bad value, and
 * `sandgate config` showing them with header values redacted.
 */

const settings = (env: Record<string, string>, argv: string[] = []) => tracingSettings(resolveConfig({ env, argv }));
const rejects = (env: Record<string, string>, pattern: RegExp, argv: string[] = []): unknown => expectSandgateError(() => settings(env, argv), 'config_invalid', pattern);

describe('tracing options from the OTEL_* environment', () => {
  it('is off unless an endpoint or OTEL_TRACES_EXPORTER=otlp turns it on; OTEL_SDK_DISABLED and `none` win', () => {
    expect(settings({})).toBeUndefined();
    expect(settings({ OTEL_EXPORTER_OTLP_ENDPOINT: '' })).toBeUndefined();
    expect(settings({ OTEL_TRACES_EXPORTER: 'otlp' })?.url).toBe('http://localhost:4318/v1/traces');
    expect(settings({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' })?.url).toBe('http://localhost:4317/');
    expect(settings({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://c:4318/t' })?.url).toBe('http://c:4318/t');
    expect(settings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'TRUE' })).toBeUndefined();
    expect(settings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_TRACES_EXPORTER: 'none' })).toBeUndefined();
  });

  it('builds the traces URL as the specification says', () => {
    const table: [Record<string, string>, string][] = [
      [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318' }, 'http://c:4318/v1/traces'],
      [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'https://c/otlp' }, 'https://c/otlp/v1/traces'],
      [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'https://c/otlp/' }, 'https://c/otlp/v1/traces'],
      [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://t:9/custom' }, 'http://t:9/custom'],
      [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4317', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }, 'http://c:4317/'],
      [{ OTEL_EXPORTER_OTLP_ENDPOINT: 'https://c:4317', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'GRPC' }, 'https://c:4317/'],
    ];
    for (const [env, url] of table) expect(settings(env)?.url, JSON.stringify(env)).toBe(url);
  });

  it('takes each OTEL_EXPORTER_OTLP_TRACES_* over its generic variable', () => {
    const base = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_EXPORTER_OTLP_TIMEOUT: '2000', OTEL_EXPORTER_OTLP_COMPRESSION: 'gzip', OTEL_EXPORTER_OTLP_CERTIFICATE: '/ca.pem' };
    expect(settings(base)).toMatchObject({ protocol: 'http/protobuf', timeoutMs: 2000, compression: 'gzip', ca: { path: '/ca.pem', option: 'OTEL_EXPORTER_OTLP_CERTIFICATE' } });
    expect(
      settings({
        ...base,
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
        OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: '500',
        OTEL_EXPORTER_OTLP_TRACES_COMPRESSION: 'none',
        OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE: '/traces-ca.pem',
        OTEL_EXPORTER_OTLP_HEADERS: 'a=1,b=1',
        OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'b=2',
      }),
    ).toMatchObject({ protocol: 'http/json', timeoutMs: 500, compression: 'none', ca: { path: '/traces-ca.pem', option: 'OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE' }, headers: { a: '1', b: '2' } });
  });

  it('reads the sampler, the resource and the batch processor; flags and files name the same options', () => {
    const s = settings({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_TRACES_SAMPLER: 'ParentBased_TraceIdRatio', OTEL_TRACES_SAMPLER_ARG: '0.25', OTEL_RESOURCE_ATTRIBUTES: 'k8s.pod.name=p%2C1, team = a ', OTEL_BSP_SCHEDULE_DELAY: '100' });
    expect(s).toMatchObject({ sampler: 'parentbased_traceidratio', ratio: 0.25, resource: { 'k8s.pod.name': 'p,1', team: 'a' }, batch: { scheduledDelayMillis: 100, maxQueueSize: 2048 } });
    expect(settings({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_TRACES_SAMPLER: 'always_off', OTEL_TRACES_SAMPLER_ARG: 'ignored' })?.ratio).toBe(1);
    expect(settings({}, ['--otel-traces-exporter', 'otlp', '--otel-exporter-otlp-protocol=grpc'])?.protocol).toBe('grpc');
  });

  it('refuses bad values with config_invalid naming the variable', () => {
    rejects({ OTEL_EXPORTER_OTLP_PROTOCOL: 'thrift' }, /OTEL_EXPORTER_OTLP_PROTOCOL: must be one of grpc, http\/protobuf, http\/json/);
    rejects({ OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http' }, /OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: must be one of/);
    rejects({ OTEL_TRACES_EXPORTER: 'zipkin' }, /OTEL_TRACES_EXPORTER: unknown value "zipkin"/);
    rejects({ OTEL_TRACES_SAMPLER: 'jaeger_remote' }, /OTEL_TRACES_SAMPLER: must be one of/);
    rejects({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '1.5' }, /OTEL_TRACES_SAMPLER_ARG: "1.5".*from 0 to 1/);
    rejects({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: 'half' }, /OTEL_TRACES_SAMPLER_ARG/);
    rejects({ OTEL_EXPORTER_OTLP_ENDPOINT: 'collector:4317' }, /OTEL_EXPORTER_OTLP_ENDPOINT: "collector:4317": the scheme must be http/);
    rejects({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'not a url' }, /OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "not a url" is not a URL/);
    rejects({ OTEL_EXPORTER_OTLP_TIMEOUT: '10s' }, /OTEL_EXPORTER_OTLP_TIMEOUT: expected a whole number/);
    rejects({ OTEL_EXPORTER_OTLP_COMPRESSION: 'zstd' }, /OTEL_EXPORTER_OTLP_COMPRESSION: must be one of gzip, none/);
    rejects({ OTEL_SDK_DISABLED: 'maybe' }, /OTEL_SDK_DISABLED: expected true or false/);
    rejects({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_BSP_MAX_QUEUE_SIZE: '10', OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '20' }, /OTEL_BSP_MAX_EXPORT_BATCH_SIZE: 20 is more than OTEL_BSP_MAX_QUEUE_SIZE/);
    rejects({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_RESOURCE_ATTRIBUTES: 'team' }, /OTEL_RESOURCE_ATTRIBUTES: entry 1 is not key=value/);
    rejects({ SANDGATE_OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' }, /unknown environment variable SANDGATE_OTEL_EXPORTER_OTLP_PROTOCOL/);
  });

  it('names a bad header without repeating its value, which may be a secret', () => {
    const err = rejects({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_HEADERS: 'authorization=Bearer%zzsecret-token' }, /OTEL_EXPORTER_OTLP_HEADERS: entry 1 has a malformed percent-encoding/) as Error;
    expect(err.message).not.toContain('secret-token');
    rejects({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'ok=1,bad name=secret-token' }, /OTEL_EXPORTER_OTLP_TRACES_HEADERS: entry 2: "bad name" is not a valid header name/);
  });

  it('a certificate file that cannot be read stops the start, naming its variable', async () => {
    const s = settings({ OTEL_EXPORTER_OTLP_ENDPOINT: 'https://c:4318', OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY: '/nonexistent/client.key' })!;
    await expect(createExporter(s)).rejects.toMatchObject({ code: 'config_invalid', message: expect.stringMatching(/^OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY: cannot read \/nonexistent\/client.key/) });
  });
});

describe('--trace-trusted-sources', () => {
  it('matches addresses and CIDR blocks of both families, IPv4-mapped IPv6 peers as IPv4', () => {
    const set = new AddressSet(['10.0.0.0/8', '192.0.2.7', 'fd00::/8', '::1']);
    for (const a of ['10.1.2.3', '::ffff:10.1.2.3', '192.0.2.7', 'fd12::1', '::1', 'fd00::1%eth0']) expect(set.has(a), a).toBe(true);
    for (const a of ['11.0.0.1', '192.0.2.8', '::ffff:192.0.2.8', 'fe80::1', '', 'envoy', '10.0.0.1:80']) expect(set.has(a), a).toBe(false);
    expect(new AddressSet([]).has('127.0.0.1')).toBe(false);
  });

  it('refuses what is not an address or a CIDR block', () => {
    for (const bad of ['envoy.internal', '10.0.0.0/33', '10.0.0.0/8x', 'fd00::/129', '10.0.0.0/', '/8']) {
      expectSandgateError(() => resolveConfig({ argv: ['--trace-trusted-sources', bad] }), 'config_invalid', /--trace-trusted-sources: /);
    }
    expect(resolveConfig({ env: { SANDGATE_TRACE_TRUSTED_SOURCES: '10.0.0.0/8, fd00::/8' } }).traceTrustedSources).toEqual(['10.0.0.0/8', 'fd00::/8']);
  });
});

describe('sandgate config', () => {
  it('shows the resolved OTEL_* options, header values redacted', async () => {
    const cli = fileURLToPath(new URL('../../dist/src/cli/main.js', import.meta.url));
    const env = { PATH: process.env.PATH ?? '', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'grpc', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4317', OTEL_EXPORTER_OTLP_HEADERS: 'x-api-key=hunter2-otel' };
    const { stdout } = await promisify(execFile)(process.execPath, [cli, 'config', '--trace-trusted-sources', '10.0.0.0/8'], { env });
    const shown = JSON.parse(stdout) as Record<string, unknown>;
    expect(shown).toMatchObject({ otelExporterOtlpTracesProtocol: 'grpc', otelExporterOtlpProtocol: 'http/protobuf', otelExporterOtlpEndpoint: 'http://collector:4317', otelExporterOtlpHeaders: '[redacted]', traceTrustedSources: ['10.0.0.0/8'] });
    expect(stdout).not.toContain('hunter2-otel');
  });
});

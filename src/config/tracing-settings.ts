import { SandgateError } from '../domain/errors.js';
import { AddressSet } from '../lib/address-set.js';
import type { OtlpProtocol, SamplerName, TlsFile, TracingSettings } from '../observability/tracing.js';
import { envOf, type Config } from './schema.js';

/**
 * What the tracing options mean (config/tracing-options.ts): whether tracing is on, and the exporter,
 * sampler, resource and batching it runs with. The rules are the OpenTelemetry specification's ("OTLP
 * Exporter", "Environment Variable Specification"): a signal-specific `OTEL_EXPORTER_OTLP_TRACES_*`
 * option wins over its generic one; the traces endpoint is used as it is, while over HTTP the generic
 * endpoint gets `v1/traces` appended; an empty value is unset. Every value is checked here, once: a bad
 * one is `config_invalid` naming its variable, never a warning and a silent default.
 */

type TracingConfig = Pick<Config, Extract<keyof Config, `otel${string}` | 'traceTrustedSources'>>;

const DEFAULT_ENDPOINT: Record<OtlpProtocol, string> = { grpc: 'http://localhost:4317', 'http/protobuf': 'http://localhost:4318', 'http/json': 'http://localhost:4318' };
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

function invalid(option: string, why: string): SandgateError {
  return new SandgateError('config_invalid', `${envOf(option)}: ${why}`);
}

/** The gateway's tracing; undefined when the options leave it off. Throws `config_invalid`. */
export function tracingSettings(c: TracingConfig): TracingSettings | undefined {
  let trusted: AddressSet;
  try {
    trusted = new AddressSet(c.traceTrustedSources);
  } catch (err) {
    throw new SandgateError('config_invalid', `--trace-trusted-sources: ${(err as Error).message}`, { cause: err });
  }
  if (c.otelSdkDisabled || c.otelTracesExporter.includes('none')) return undefined;
  if (!c.otelTracesExporter.includes('otlp') && c.otelExporterOtlpEndpoint === '' && c.otelExporterOtlpTracesEndpoint === '') return undefined;
  const protocol = (c.otelExporterOtlpTracesProtocol || c.otelExporterOtlpProtocol) as OtlpProtocol;
  const tracesTimeout = c.otelExporterOtlpTracesTimeout;
  return {
    protocol,
    url: endpoint(c, protocol),
    headers: { ...keyValues(c.otelExporterOtlpHeaders, 'otelExporterOtlpHeaders', true), ...keyValues(c.otelExporterOtlpTracesHeaders, 'otelExporterOtlpTracesHeaders', true) },
    timeoutMs: tracesTimeout >= 0 ? tracesTimeout : c.otelExporterOtlpTimeout,
    compression: (c.otelExporterOtlpTracesCompression || c.otelExporterOtlpCompression) as 'gzip' | 'none',
    ca: tlsFile(c, 'otelExporterOtlpTracesCertificate', 'otelExporterOtlpCertificate'),
    clientKey: tlsFile(c, 'otelExporterOtlpTracesClientKey', 'otelExporterOtlpClientKey'),
    clientCertificate: tlsFile(c, 'otelExporterOtlpTracesClientCertificate', 'otelExporterOtlpClientCertificate'),
    sampler: c.otelTracesSampler as SamplerName,
    ratio: ratio(c),
    resource: resource(c),
    batch: batch(c),
    trusted: (address) => trusted.has(address),
  };
}

function endpoint(c: TracingConfig, protocol: OtlpProtocol): string {
  const [option, raw] =
    c.otelExporterOtlpTracesEndpoint !== ''
      ? (['otelExporterOtlpTracesEndpoint', c.otelExporterOtlpTracesEndpoint] as const)
      : (['otelExporterOtlpEndpoint', c.otelExporterOtlpEndpoint || DEFAULT_ENDPOINT[protocol]] as const);
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw invalid(option, `${JSON.stringify(raw)} is not a URL; expected http://host:port or https://host:port`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw invalid(option, `${JSON.stringify(raw)}: the scheme must be http (plain) or https (TLS)`);
  // Over gRPC the path is not part of the target; over HTTP only the generic endpoint gets the signal's path.
  if (protocol === 'grpc' || option === 'otelExporterOtlpTracesEndpoint') return url.href;
  if (!url.pathname.endsWith('/')) url.pathname += '/';
  url.pathname += 'v1/traces';
  return url.href;
}

/** `key=value,…` (W3C Baggage without properties; values percent-encoded), as headers and resource attributes are written. */
function keyValues(text: string, option: string, header: boolean): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [i, item] of text.split(',').entries()) {
    if (item.trim() === '') continue;
    const eq = item.indexOf('=');
    // A header's value may be a secret: messages name the entry by position and key only.
    if (eq <= 0) throw invalid(option, `entry ${i + 1} is not key=value`);
    const key = decode(item.slice(0, eq).trim(), option, i);
    if (key === '' || (header && !TOKEN.test(key))) throw invalid(option, `entry ${i + 1}: ${JSON.stringify(key)} is not a valid ${header ? 'header name' : 'key'}`);
    out[header ? key.toLowerCase() : key] = decode(item.slice(eq + 1).trim(), option, i);
  }
  return out;
}

function decode(s: string, option: string, i: number): string {
  try {
    return decodeURIComponent(s);
  } catch {
    throw invalid(option, `entry ${i + 1} has a malformed percent-encoding`);
  }
}

function tlsFile(c: TracingConfig, traces: 'otelExporterOtlpTracesCertificate' | 'otelExporterOtlpTracesClientKey' | 'otelExporterOtlpTracesClientCertificate', generic: keyof TracingConfig): TlsFile | undefined {
  if (c[traces] !== '') return { path: c[traces], option: envOf(traces) };
  const path = c[generic];
  return typeof path === 'string' && path !== '' ? { path, option: envOf(generic) } : undefined;
}

function ratio(c: TracingConfig): number {
  const arg = c.otelTracesSamplerArg.trim();
  if (!c.otelTracesSampler.endsWith('traceidratio') || arg === '') return 1;
  const r = /^(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?$/i.test(arg) ? Number(arg) : NaN;
  if (!(r >= 0 && r <= 1)) throw invalid('otelTracesSamplerArg', `${JSON.stringify(arg)}: the ratio of ${c.otelTracesSampler} must be a number from 0 to 1`);
  return r;
}

function resource(c: TracingConfig): Record<string, string> {
  const attributes = keyValues(c.otelResourceAttributes, 'otelResourceAttributes', false);
  if (c.otelServiceName !== '') attributes['service.name'] = c.otelServiceName;
  return attributes;
}

function batch(c: TracingConfig): TracingSettings['batch'] {
  if (c.otelBspMaxExportBatchSize > c.otelBspMaxQueueSize) {
    throw invalid('otelBspMaxExportBatchSize', `${c.otelBspMaxExportBatchSize} is more than OTEL_BSP_MAX_QUEUE_SIZE (${c.otelBspMaxQueueSize})`);
  }
  return { scheduledDelayMillis: c.otelBspScheduleDelay, exportTimeoutMillis: c.otelBspExportTimeout, maxQueueSize: c.otelBspMaxQueueSize, maxExportBatchSize: c.otelBspMaxExportBatchSize };
}

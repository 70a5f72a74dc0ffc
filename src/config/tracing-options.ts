import type { OptionSpec } from './schema.js';

/**
 * The tracing options of the schema. All but `--trace-trusted-sources` are the OpenTelemetry SDK's own
 * environment variables (OpenTelemetry specification, "Environment Variable Specification" and "OTLP
 * Exporter"): their `env` is the standard name, not a `SANDGATE_*` one, so a deployment configured for
 * any OpenTelemetry SDK configures sandgate too; each is also a flag and a config-file key. An empty
 * variable counts as unset, as the specification says. Each `OTEL_EXPORTER_OTLP_TRACES_*` option, when
 * set, wins over its `OTEL_EXPORTER_OTLP_*` counterpart (config/tracing-settings.ts gives them meaning).
 */

const PROTOCOLS = ['grpc', 'http/protobuf', 'http/json'];
const COMPRESSIONS = ['gzip', 'none'];

const traces = (generic: string): string => `For traces only; when set, instead of \`${generic}\`.`;

export const TRACING_OPTIONS = {
  traceTrustedSources: {
    kind: 'list',
    default: [],
    description:
      'Addresses (CIDR, e.g. `10.0.0.0/8`, or single addresses) whose W3C `traceparent` tracing continues, sampling decision included: Envoy, nginx, peer gateways. A request from any other address starts a trace of its own, sampled by `OTEL_TRACES_SAMPLER`, with a span link to the trace it came with (docs/operations.md). Empty: none trusted.',
  },
  otelSdkDisabled: { kind: 'bool', env: 'OTEL_SDK_DISABLED', default: false, description: 'Turns tracing off, whatever else is set.' },
  otelTracesExporter: {
    kind: 'list',
    env: 'OTEL_TRACES_EXPORTER',
    default: [],
    values: ['otlp', 'none'],
    description: '`otlp` turns tracing on (with the default endpoint when none is set); `none` turns it off. Tracing is also on when an OTLP endpoint is set.',
  },
  otelTracesSampler: {
    kind: 'enum',
    env: 'OTEL_TRACES_SAMPLER',
    default: 'parentbased_always_on',
    values: ['always_on', 'always_off', 'traceidratio', 'parentbased_always_on', 'parentbased_always_off', 'parentbased_traceidratio'],
    description: 'Which requests are traced. `parentbased_*` follow the sampled flag of a trusted `traceparent` (`--trace-trusted-sources`) and sample other requests as their suffix says.',
  },
  otelTracesSamplerArg: { kind: 'string', env: 'OTEL_TRACES_SAMPLER_ARG', default: '', description: 'The ratio (0 to 1) of the `traceidratio` samplers (default 1).' },
  otelServiceName: { kind: 'string', env: 'OTEL_SERVICE_NAME', default: '', description: 'The `service.name` of spans (default `sandgate`).' },
  otelResourceAttributes: {
    kind: 'string',
    env: 'OTEL_RESOURCE_ATTRIBUTES',
    default: '',
    description: 'More resource attributes, `key=value,…` with percent-encoded values (`OTEL_SERVICE_NAME` wins for `service.name`).',
  },
  otelExporterOtlpEndpoint: {
    kind: 'string',
    env: 'OTEL_EXPORTER_OTLP_ENDPOINT',
    default: '',
    description: 'OTLP endpoint, an `http://` or `https://` URL; setting it turns tracing on. Over HTTP, `v1/traces` is appended to its path; over gRPC its path is ignored. Default `http://localhost:4318` (HTTP), `http://localhost:4317` (gRPC).',
  },
  otelExporterOtlpTracesEndpoint: {
    kind: 'string',
    env: 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT',
    default: '',
    description: `OTLP endpoint for traces, used as it is (nothing appended); setting it turns tracing on. ${traces('OTEL_EXPORTER_OTLP_ENDPOINT')}`,
  },
  otelExporterOtlpProtocol: { kind: 'enum', env: 'OTEL_EXPORTER_OTLP_PROTOCOL', default: 'http/protobuf', values: PROTOCOLS, description: 'OTLP transport: gRPC, or HTTP with protobuf or JSON bodies.' },
  otelExporterOtlpTracesProtocol: { kind: 'enum', env: 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL', default: '', values: PROTOCOLS, description: traces('OTEL_EXPORTER_OTLP_PROTOCOL') },
  otelExporterOtlpHeaders: {
    kind: 'string',
    env: 'OTEL_EXPORTER_OTLP_HEADERS',
    default: '',
    secret: true,
    description: 'Headers (gRPC: metadata) sent with every export, `name=value,…` with percent-encoded values, e.g. an API key of the backend.',
  },
  otelExporterOtlpTracesHeaders: {
    kind: 'string',
    env: 'OTEL_EXPORTER_OTLP_TRACES_HEADERS',
    default: '',
    secret: true,
    description: 'Headers for traces only, added to `OTEL_EXPORTER_OTLP_HEADERS` (a name in both takes this value).',
  },
  otelExporterOtlpTimeout: { kind: 'int', env: 'OTEL_EXPORTER_OTLP_TIMEOUT', default: 10_000, min: 1, max: 600_000, description: 'Milliseconds one export may take.' },
  otelExporterOtlpTracesTimeout: {
    kind: 'int',
    env: 'OTEL_EXPORTER_OTLP_TRACES_TIMEOUT',
    default: -1,
    min: -1,
    max: 600_000,
    description: `${traces('OTEL_EXPORTER_OTLP_TIMEOUT')} (-1: unset)`,
  },
  otelExporterOtlpCompression: { kind: 'enum', env: 'OTEL_EXPORTER_OTLP_COMPRESSION', default: 'none', values: COMPRESSIONS, description: 'Compression of export requests.' },
  otelExporterOtlpTracesCompression: { kind: 'enum', env: 'OTEL_EXPORTER_OTLP_TRACES_COMPRESSION', default: '', values: COMPRESSIONS, description: traces('OTEL_EXPORTER_OTLP_COMPRESSION') },
  otelExporterOtlpCertificate: {
    kind: 'string',
    env: 'OTEL_EXPORTER_OTLP_CERTIFICATE',
    default: '',
    description: 'PEM file of the CA certificates an `https://` endpoint is verified against (default: the system\'s).',
  },
  otelExporterOtlpTracesCertificate: { kind: 'string', env: 'OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE', default: '', description: traces('OTEL_EXPORTER_OTLP_CERTIFICATE') },
  otelExporterOtlpClientKey: { kind: 'string', env: 'OTEL_EXPORTER_OTLP_CLIENT_KEY', default: '', description: 'PEM private key of the client certificate presented to an `https://` endpoint (mutual TLS).' },
  otelExporterOtlpTracesClientKey: { kind: 'string', env: 'OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY', default: '', description: traces('OTEL_EXPORTER_OTLP_CLIENT_KEY') },
  otelExporterOtlpClientCertificate: { kind: 'string', env: 'OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE', default: '', description: 'PEM client certificate chain of `OTEL_EXPORTER_OTLP_CLIENT_KEY`.' },
  otelExporterOtlpTracesClientCertificate: {
    kind: 'string',
    env: 'OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE',
    default: '',
    description: traces('OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE'),
  },
  otelBspScheduleDelay: { kind: 'int', env: 'OTEL_BSP_SCHEDULE_DELAY', default: 5000, min: 0, max: 3_600_000, description: 'Milliseconds between two exports of finished spans.' },
  otelBspExportTimeout: { kind: 'int', env: 'OTEL_BSP_EXPORT_TIMEOUT', default: 30_000, min: 1, max: 3_600_000, description: 'Milliseconds a batch export may take before it is abandoned.' },
  otelBspMaxQueueSize: { kind: 'int', env: 'OTEL_BSP_MAX_QUEUE_SIZE', default: 2048, min: 1, max: 10_000_000, description: 'Finished spans held for export; more are dropped.' },
  otelBspMaxExportBatchSize: {
    kind: 'int',
    env: 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE',
    default: 512,
    min: 1,
    max: 10_000_000,
    description: 'Spans in one export request (at most `OTEL_BSP_MAX_QUEUE_SIZE`).',
  },
} as const satisfies Record<string, OptionSpec>;

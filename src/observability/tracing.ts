import type { Tracing } from './otel-tracer.js';

/**
 * Tracing as the configuration resolves it (config/tracing-settings.ts gives the options their meaning).
 * The OpenTelemetry SDK and the one exporter chosen (otel-tracer.ts, otel-exporter.ts) are loaded only
 * when tracing is on, so a gateway without tracing neither imports nor constructs any of it.
 */

export type OtlpProtocol = 'grpc' | 'http/protobuf' | 'http/json';
export type SamplerName = 'always_on' | 'always_off' | 'traceidratio' | 'parentbased_always_on' | 'parentbased_always_off' | 'parentbased_traceidratio';

/** A PEM file the exporter reads at start, and the variable that named it (for the error when it cannot). */
export interface TlsFile {
  readonly path: string;
  readonly option: string;
}

export interface TracingSettings {
  readonly protocol: OtlpProtocol;
  /** Over HTTP the full URL of the traces endpoint; over gRPC `http(s)://host:port` (https: TLS). */
  readonly url: string;
  /** Lower-case names; over gRPC, metadata. */
  readonly headers: Readonly<Record<string, string>>;
  readonly timeoutMs: number;
  readonly compression: 'gzip' | 'none';
  readonly ca: TlsFile | undefined;
  readonly clientKey: TlsFile | undefined;
  readonly clientCertificate: TlsFile | undefined;
  readonly sampler: SamplerName;
  /** The `traceidratio` samplers' ratio. */
  readonly ratio: number;
  /** Resource attributes besides `service.name` = `sandgate` and `service.instance.id` = the gateway id (these win over them). */
  readonly resource: Readonly<Record<string, string>>;
  readonly batch: { readonly scheduledDelayMillis: number; readonly exportTimeoutMillis: number; readonly maxQueueSize: number; readonly maxExportBatchSize: number };
  /** Whether a request that came over a connection from `address` may decide its trace (`--trace-trusted-sources`). */
  readonly trusted: (address: string) => boolean;
}

/** The gateway's tracer, or undefined (and the SDK not even loaded) when tracing is off. */
export async function startTracing(settings: TracingSettings | undefined, gatewayId: string): Promise<Tracing | undefined> {
  if (settings === undefined) return undefined;
  const [{ Tracing }, { createExporter }] = await Promise.all([import('./otel-tracer.js'), import('./otel-exporter.js')]);
  return new Tracing(settings, gatewayId, await createExporter(settings));
}

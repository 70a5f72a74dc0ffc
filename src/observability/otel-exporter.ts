import { readFileSync } from 'node:fs';
import type { SpanExporter } from '@opentelemetry/sdk-trace-base';
import type { OTLPTraceExporter as HttpExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { SandgateError } from '../domain/errors.js';
import type { TlsFile, TracingSettings } from './tracing.js';

/**
 * The OTLP span exporter of the configured protocol, from the OpenTelemetry exporters: gRPC
 * (`@opentelemetry/exporter-trace-otlp-grpc`, on the gateway's own `@grpc/grpc-js`), HTTP with protobuf
 * bodies (`…-otlp-proto`) or with JSON bodies (`…-otlp-http`). Only the chosen one is loaded. Every
 * setting is passed explicitly from the resolved configuration; the TLS files are read here, at start.
 */

type Compression = NonNullable<NonNullable<ConstructorParameters<typeof HttpExporter>[0]>['compression']>;

function read(file: TlsFile | undefined): Buffer | undefined {
  if (file === undefined) return undefined;
  try {
    return readFileSync(file.path);
  } catch (err) {
    throw new SandgateError('config_invalid', `${file.option}: cannot read ${file.path}: ${(err as Error).message}`, { cause: err });
  }
}

export async function createExporter(s: TracingSettings): Promise<SpanExporter> {
  const ca = read(s.ca);
  const key = read(s.clientKey);
  const cert = read(s.clientCertificate);
  const compression = s.compression as Compression;
  if (s.protocol === 'grpc') {
    const [{ OTLPTraceExporter }, { credentials, Metadata }] = await Promise.all([import('@opentelemetry/exporter-trace-otlp-grpc'), import('@grpc/grpc-js')]);
    const metadata = new Metadata();
    for (const [name, value] of Object.entries(s.headers)) metadata.set(name, value);
    // The scheme decides: https is TLS (with the given CA and client pair), http is plaintext (h2c).
    const channel = s.url.startsWith('https:') ? credentials.createSsl(ca ?? null, key ?? null, cert ?? null) : credentials.createInsecure();
    return new OTLPTraceExporter({ url: s.url, metadata, credentials: channel, timeoutMillis: s.timeoutMs, compression });
  }
  const { OTLPTraceExporter } = s.protocol === 'http/json' ? await import('@opentelemetry/exporter-trace-otlp-http') : await import('@opentelemetry/exporter-trace-otlp-proto');
  const tls = { ...(ca && { ca }), ...(key && { key }), ...(cert && { cert }) };
  return new OTLPTraceExporter({ url: s.url, headers: { ...s.headers }, timeoutMillis: s.timeoutMs, compression, httpAgentOptions: { keepAlive: true, ...tls } });
}

import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { loadSync } from '@grpc/proto-loader';

/**
 * A real OTLP/HTTP trace receiver: `POST /v1/traces` with an `ExportTraceServiceRequest` in protobuf,
 * decoded with the OpenTelemetry proto definitions (test/vendor/otlp), answered with an empty
 * `ExportTraceServiceResponse` as a collector does.
 */

const PROTOS = fileURLToPath(new URL('../vendor/otlp', import.meta.url));
const definition = loadSync('opentelemetry/proto/collector/trace/v1/trace_service.proto', { includeDirs: [PROTOS], keepCase: true, longs: String, enums: Number, defaults: false, oneofs: true });
const service = definition['opentelemetry.proto.collector.trace.v1.TraceService'] as unknown as { Export: { requestDeserialize(b: Buffer): ExportRequest } };

interface AnyValue {
  string_value?: string;
  int_value?: string;
  bool_value?: boolean;
  double_value?: number;
}
interface ExportRequest {
  resource_spans?: { resource?: { attributes?: { key: string; value: AnyValue }[] }; scope_spans?: { spans?: RawSpan[] }[] }[];
}
interface RawSpan {
  trace_id: Buffer;
  span_id: Buffer;
  parent_span_id?: Buffer;
  name: string;
  kind?: number;
  start_time_unix_nano: string;
  end_time_unix_nano: string;
  attributes?: { key: string; value: AnyValue }[];
  status?: { code?: number; message?: string };
}

/** A span as the tests read it: ids in hex, attributes as plain values. */
export interface ReceivedSpan {
  readonly traceId: string;
  readonly spanId: string;
  /** '' for a root span. */
  readonly parentSpanId: string;
  readonly name: string;
  /** OTLP SpanKind: 2 server, 3 client, 1 internal. */
  readonly kind: number;
  readonly start: bigint;
  readonly end: bigint;
  readonly attributes: Record<string, string | number | boolean>;
  readonly resource: Record<string, string | number | boolean>;
  readonly status: number;
}

const valueOf = (v: AnyValue): string | number | boolean => v.string_value ?? (v.int_value !== undefined ? Number(v.int_value) : (v.bool_value ?? v.double_value ?? ''));
const attrs = (list: { key: string; value: AnyValue }[] | undefined) => Object.fromEntries((list ?? []).map((a) => [a.key, valueOf(a.value)]));

export interface OtlpReceiver {
  readonly url: string;
  readonly spans: ReceivedSpan[];
  /** Export requests received (also the empty ones). */
  readonly requests: number;
  close(): Promise<void>;
}

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  let requests = 0;
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.method !== 'POST' || req.url !== '/v1/traces' || req.headers['content-type'] !== 'application/x-protobuf') {
        res.writeHead(400).end();
        return;
      }
      requests++;
      const body = service.Export.requestDeserialize(Buffer.concat(chunks));
      for (const rs of body.resource_spans ?? []) {
        const resource = attrs(rs.resource?.attributes);
        for (const ss of rs.scope_spans ?? []) {
          for (const s of ss.spans ?? []) {
            spans.push({
              traceId: s.trace_id.toString('hex'),
              spanId: s.span_id.toString('hex'),
              parentSpanId: s.parent_span_id?.toString('hex') ?? '',
              name: s.name,
              kind: s.kind ?? 0,
              start: BigInt(s.start_time_unix_nano),
              end: BigInt(s.end_time_unix_nano),
              attributes: attrs(s.attributes),
              resource,
              status: s.status?.code ?? 0,
            });
          }
        }
      }
      res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    spans,
    get requests() {
      return requests;
    },
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

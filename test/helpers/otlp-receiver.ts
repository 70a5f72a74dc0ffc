import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import { Server as GrpcServer, ServerCredentials, loadPackageDefinition, type GrpcObject, type ServiceClientConstructor, type sendUnaryData, type ServerUnaryCall } from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';

/**
 * A real OTLP trace receiver on loopback, for each protocol a collector's `otlp` receiver speaks: gRPC
 * (`TraceService/Export`, a grpc-js server), HTTP with a protobuf body and HTTP with a JSON body (`POST
 * /v1/traces`). Protobuf is decoded with the OpenTelemetry proto definitions (test/vendor/otlp); JSON as
 * OTLP/JSON writes it (camelCase fields, ids in hex, 64-bit integers as strings).
 */

export type OtlpProtocol = 'grpc' | 'http/protobuf' | 'http/json';

const PROTOS = fileURLToPath(new URL('../vendor/otlp', import.meta.url));
const definition = loadSync('opentelemetry/proto/collector/trace/v1/trace_service.proto', { includeDirs: [PROTOS], longs: String, enums: Number, defaults: false, oneofs: true });
const service = definition['opentelemetry.proto.collector.trace.v1.TraceService'] as unknown as { Export: { requestDeserialize(b: Buffer): ExportRequest } };
const grpcService = ((loadPackageDefinition(definition).opentelemetry as GrpcObject).proto as GrpcObject & { collector: { trace: { v1: { TraceService: ServiceClientConstructor } } } }).collector.trace.v1.TraceService
  .service;

interface AnyValue {
  stringValue?: string;
  intValue?: string | number;
  boolValue?: boolean;
  doubleValue?: number;
}
type Id = Buffer | string;
interface ExportRequest {
  resourceSpans?: { resource?: { attributes?: KeyValue[] }; scopeSpans?: { spans?: RawSpan[] }[] }[];
}
interface KeyValue {
  key: string;
  value: AnyValue;
}
interface RawSpan {
  traceId: Id;
  spanId: Id;
  parentSpanId?: Id;
  name: string;
  kind?: number;
  startTimeUnixNano: string;
  endTimeUnixNano: string;
  attributes?: KeyValue[];
  links?: { traceId: Id; spanId: Id }[];
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
  readonly links: readonly { readonly traceId: string; readonly spanId: string }[];
  readonly status: number;
}

const hex = (id: Id | undefined): string => (id === undefined ? '' : typeof id === 'string' ? id : id.toString('hex'));
const valueOf = (v: AnyValue): string | number | boolean => v.stringValue ?? (v.intValue !== undefined ? Number(v.intValue) : (v.boolValue ?? v.doubleValue ?? ''));
const attrs = (list: KeyValue[] | undefined) => Object.fromEntries((list ?? []).map((a) => [a.key, valueOf(a.value)]));

export interface OtlpReceiver {
  /** `http://127.0.0.1:<port>`: the base endpoint (HTTP: `/v1/traces` under it; gRPC: the target). */
  readonly url: string;
  readonly spans: ReceivedSpan[];
  /** Export requests received (also the empty ones). */
  readonly requests: number;
  /** The headers (gRPC: metadata) of the last export request. */
  readonly lastHeaders: Readonly<Record<string, string>>;
  close(): Promise<void>;
}

export async function startOtlpReceiver(protocol: OtlpProtocol = 'http/protobuf'): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  let requests = 0;
  let lastHeaders: Record<string, string> = {};
  const receive = (body: ExportRequest, headers: Record<string, string>): void => {
    requests++;
    lastHeaders = headers;
    for (const rs of body.resourceSpans ?? []) {
      const resource = attrs(rs.resource?.attributes);
      for (const ss of rs.scopeSpans ?? []) {
        for (const s of ss.spans ?? []) {
          spans.push({
            traceId: hex(s.traceId),
            spanId: hex(s.spanId),
            parentSpanId: hex(s.parentSpanId),
            name: s.name,
            kind: s.kind ?? 0,
            start: BigInt(s.startTimeUnixNano),
            end: BigInt(s.endTimeUnixNano),
            attributes: attrs(s.attributes),
            resource,
            links: (s.links ?? []).map((l) => ({ traceId: hex(l.traceId), spanId: hex(l.spanId) })),
            status: s.status?.code ?? 0,
          });
        }
      }
    }
  };
  const receiver = (url: string, close: () => Promise<void>): OtlpReceiver => ({
    url,
    spans,
    get requests() {
      return requests;
    },
    get lastHeaders() {
      return lastHeaders;
    },
    close,
  });

  if (protocol === 'grpc') {
    const server = new GrpcServer();
    server.addService(grpcService, {
      Export: (call: ServerUnaryCall<ExportRequest, object>, done: sendUnaryData<object>) => {
        receive(call.request, Object.fromEntries(Object.entries(call.metadata.getMap()).map(([k, v]) => [k, String(v)])));
        done(null, {});
      },
    });
    const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))));
    return receiver(`http://127.0.0.1:${port}`, () => new Promise<void>((r) => server.tryShutdown(() => r())));
  }

  const type = protocol === 'http/json' ? 'application/json' : 'application/x-protobuf';
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.method !== 'POST' || req.url !== '/v1/traces' || req.headers['content-type'] !== type) {
        res.writeHead(400).end();
        return;
      }
      const bytes = Buffer.concat(chunks);
      receive(protocol === 'http/json' ? (JSON.parse(bytes.toString('utf8')) as ExportRequest) : service.Export.requestDeserialize(bytes), req.headers as Record<string, string>);
      res.writeHead(200, { 'content-type': type }).end(protocol === 'http/json' ? '{}' : undefined);
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return receiver(
    `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  );
}

import { pino } from 'pino';
import { SandgateError } from '../domain/errors.js';
import type { Exchange, ExchangeSink } from './exchange.js';

/**
 * The access log (`--access-log stdout|stderr|FILE|off`): one JSON line per request at each door it
 * passes, written from the exchange record (exchange.ts) through pino's asynchronous destination
 * (sonic-boom), off the request's own path. Field names follow Envoy's access-log vocabulary where it has
 * one (`start_time`, `method`, `path`, `response_code`, `response_code_details`, `bytes_received`,
 * `bytes_sent`, `duration`, `upstream_host`, `upstream_service_time`, `x_request_id`,
 * `downstream_remote_address`); `ACCESS_LOG_SCHEMA` is the documented schema (docs/operations.md) and
 * what the tests check every line against. A line carries no header but `x-request-id`, and a path never
 * its query string: no API key, traffic token or link token reaches it.
 */

const nullable = (type: string) => ({ type: [type, 'null'] });
const ms = { type: ['number', 'null'], minimum: 0 };

/** JSON Schema (draft 2020-12) of one access-log line. */
export const ACCESS_LOG_SCHEMA = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  title: 'sandgate access log line',
  type: 'object',
  additionalProperties: false,
  required: [
    'start_time',
    'door',
    'x_request_id',
    'trace_id',
    'downstream_remote_address',
    'tenant',
    'namespace',
    'name',
    'port',
    'method',
    'path',
    'response_code',
    'response_code_details',
    'bytes_received',
    'bytes_sent',
    'duration',
    'wait_duration',
    'upstream_service_time',
    'upstream_host',
    'gateway_id',
  ],
  properties: {
    start_time: { type: 'string', format: 'date-time', description: 'When the door received the request (RFC 3339, UTC, milliseconds).' },
    door: { enum: ['proxy', 'http_authz', 'ext_authz', 'ext_proc', 'relay'], description: 'The door that answered.' },
    x_request_id: { ...nullable('string'), maxLength: 128, description: 'The request\'s `x-request-id` (Envoy sets one), at most 128 characters.' },
    trace_id: { ...nullable('string'), pattern: '^[0-9a-f]{32}$', description: 'The W3C trace id: the trace sandgate made or continued, else the one of an incoming `traceparent`.' },
    downstream_remote_address: { type: 'string', description: 'Address of the connection the request came on (at ext_authz: Envoy\'s `source` address of the client).' },
    policy: { ...nullable('string'), description: 'The access policy rule that let an allowed request in: `public`, `keys` or `jwt` (docs/identity.md); null for a denial.' },
    tenant: { ...nullable('string'), description: 'Who asked: the API key\'s team, `admin`, `anonymous` or `invalid`; null at the relay listener (peers and Envoy, no tenant).' },
    namespace: { ...nullable('string'), description: 'The sandbox\'s namespace, when the request named one.' },
    name: { ...nullable('string'), description: 'The sandbox\'s name, when the request named one (null when it named an id that resolved to nothing).' },
    port: { type: ['integer', 'null'], minimum: 0, maximum: 65535, description: 'The sandbox port the request is for.' },
    method: { type: 'string', description: 'HTTP method (at ext_proc and ext_authz: of the checked request).' },
    path: { type: 'string', description: 'The request path without its query string or fragment.' },
    response_code: { type: 'integer', minimum: 0, maximum: 999, description: 'Status sent to the client: at the authorization doors 200 for an allow and the denial\'s status otherwise; 0 when no answer was written.' },
    response_code_details: { type: 'string', description: '`ok`, a denial\'s error code (docs/errors.md), `client_closed` (the client left before any answer) or `incomplete` (the response was cut after its head).' },
    bytes_received: { type: 'integer', minimum: 0, description: 'Request body bytes read from the client (0 at the authorization doors: Envoy carries the body).' },
    bytes_sent: { type: 'integer', minimum: 0, description: 'Response body bytes written to the client (at the authorization doors: the denial body sandgate gave, 0 for an allow).' },
    duration: { type: 'number', minimum: 0, description: 'Milliseconds from receiving the request to the end of the answer.' },
    wait_duration: { ...ms, description: 'Milliseconds spent in a readiness wait (or resume); null when the request did not wait.' },
    upstream_service_time: { ...ms, description: 'Milliseconds from sending the request upstream to its response head; null when it never left or no head came back.' },
    upstream_host: { ...nullable('string'), description: '`host:port` the request was sent to: the sandbox, a peer gateway\'s relay listener, or `relay:<namespace>/<name>:<port>` for a local relay stream.' },
    gateway_id: { type: 'string', description: 'The gateway that wrote the line (`--gateway-id`).' },
  },
} as const;

const round = (n: number): number => Math.round(n * 1000) / 1000;

/** The access-log line of a finished record. */
export function accessLogLine(x: Exchange, gatewayId: string): Record<string, unknown> {
  return {
    start_time: new Date(x.startMs).toISOString(),
    door: x.door,
    x_request_id: x.requestId ?? null,
    trace_id: x.traceId ?? null,
    downstream_remote_address: x.client,
    tenant: x.tenant ?? null,
    policy: x.policy ?? null,
    namespace: x.namespace ?? null,
    name: x.name ?? null,
    port: x.port ?? null,
    method: x.method,
    path: x.path,
    response_code: x.status,
    response_code_details: x.code,
    bytes_received: x.bytesIn,
    bytes_sent: x.bytesOut,
    duration: round(x.endTime - x.t0),
    wait_duration: x.waitStart === 0 ? null : round((x.waitEnd || x.endTime) - x.waitStart),
    upstream_service_time: x.upstreamHead === 0 ? null : round(x.upstreamHead - x.upstreamStart),
    upstream_host: x.upstreamHost ?? null,
    gateway_id: gatewayId,
  };
}

/** Where `--access-log` writes: undefined for `off`. */
export function accessLogTarget(value: string): 1 | 2 | string | undefined {
  switch (value) {
    case 'off':
      return undefined;
    case 'stdout':
      return 1;
    case 'stderr':
      return 2;
    case '':
      throw new SandgateError('config_invalid', '--access-log must be stdout, stderr, off or a file path');
    default:
      return value;
  }
}

/** The access log's writer: lines are buffered and written asynchronously, flushed on close. */
export class AccessLog implements ExchangeSink {
  private readonly out: ReturnType<typeof pino.destination>;
  private readonly opened: Promise<void>;
  private readonly file: boolean;

  constructor(
    target: 1 | 2 | string,
    private readonly gatewayId: string,
  ) {
    this.file = typeof target === 'string';
    const out = pino.destination({ dest: target, sync: false, mkdir: this.file });
    this.out = out;
    this.opened = !this.file
      ? Promise.resolve()
      : new Promise((resolve, reject) => {
          out.once('ready', resolve);
          out.once('error', reject);
        });
    // A file that cannot be opened is reported by ready(), which the gateway awaits at start.
    this.opened.catch(() => undefined);
  }

  /** Resolves once the destination is open (a file that cannot be opened fails here, at start). */
  ready(): Promise<void> {
    return this.opened;
  }

  write(x: Exchange): void {
    this.out.write(JSON.stringify(accessLogLine(x, this.gatewayId)) + '\n');
  }

  /** Writes what is buffered and closes a file (stdout and stderr stay open). */
  close(): Promise<void> {
    const out = this.out;
    return new Promise((resolve) => {
      if (!this.file) return out.flush(() => resolve());
      out.once('close', () => resolve());
      out.end();
    });
  }
}

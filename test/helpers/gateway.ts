import { credentials, type ChannelCredentials, type Client } from '@grpc/grpc-js';
import { resolveConfig } from '../../src/config/load.js';
import type { Driver } from '../../src/drivers/driver.js';
import { authorizationService, externalProcessorService } from '../../src/edge/envoy/protos.js';
import { startGateway, type Gateway, type GatewayOptions } from '../../src/gateway.js';
import { MemoryLogSink } from '../../src/observability/logger.js';

export interface TestGateway {
  readonly gw: Gateway;
  readonly logs: MemoryLogSink;
  readonly admin: string;
  readonly grpcTarget: string;
  /** An ext_authz and an ext_proc client of this gateway's gRPC port, closed by close(). */
  envoyClients(): { authz: EnvoyClient; proc: EnvoyClient };
  close(): Promise<void>;
}

type EnvoyClient = Client & Record<string, (...a: unknown[]) => unknown>;

/** Starts a real gateway on loopback, port 0, logging to memory. */
export async function startTestGateway(drivers: Driver[], overrides: Record<string, unknown> = {}, extra: Partial<GatewayOptions> = {}): Promise<TestGateway> {
  const logs = new MemoryLogSink();
  const config = resolveConfig({
    overrides: { listenHost: '127.0.0.1', grpcPort: 0, adminPort: 0, supervisorPort: 0, proxyPort: 0, relayPort: 0, logLevel: 'debug', shutdownTimeoutMs: 1000, gatewayId: 'gw-test', ...overrides },
  });
  const gw = await startGateway({ config, drivers, logDestination: logs, ...extra });
  const grpcTarget = `127.0.0.1:${gw.grpcPort}`;
  const clients: Client[] = [];
  return {
    gw,
    logs,
    admin: `http://127.0.0.1:${gw.adminPort}`,
    grpcTarget,
    envoyClients() {
      const pair = { authz: authzClient(grpcTarget), proc: extProcClient(grpcTarget) };
      clients.push(pair.authz, pair.proc);
      return pair;
    },
    close: () => {
      for (const c of clients) c.close();
      return gw.close();
    },
  };
}

export function authzClient(target: string, creds: ChannelCredentials = credentials.createInsecure(), options: Record<string, unknown> = {}): EnvoyClient {
  const Ctor = authorizationService();
  return new Ctor(target, creds, options) as never;
}

export function extProcClient(target: string): EnvoyClient {
  const Ctor = externalProcessorService();
  return new Ctor(target, credentials.createInsecure()) as never;
}

/** What Envoy's ext_authz filter sends: a headers map with pseudo-headers, x-forwarded-for, x-request-id. */
export function envoyCheckRequest(p: { host: string; path?: string; method?: string; headers?: Record<string, string> }) {
  const path = p.path ?? '/';
  const method = p.method ?? 'GET';
  return {
    attributes: {
      source: { address: { socket_address: { address: '203.0.113.7', port_value: 54321 } } },
      destination: { address: { socket_address: { address: '10.1.0.1', port_value: 8080 } } },
      request: {
        time: { seconds: String(Math.floor(Date.now() / 1000)), nanos: 0 },
        http: {
          id: '1234567890',
          method,
          headers: {
            ':authority': p.host,
            ':path': path,
            ':method': method,
            ':scheme': 'http',
            'user-agent': 'curl/8.5.0',
            accept: '*/*',
            'x-forwarded-for': '203.0.113.7',
            'x-forwarded-proto': 'http',
            'x-request-id': 'req-0001',
            ...p.headers,
          },
          path,
          host: p.host,
          scheme: 'http',
          protocol: 'HTTP/1.1',
        },
      },
    },
  };
}

/** Promisified unary Check. */
export function check(client: ReturnType<typeof authzClient>, req: unknown, deadlineMs = 10_000): Promise<Record<string, any>> {
  return new Promise((resolve, reject) => {
    (client.Check as (r: unknown, o: unknown, cb: (e: Error | null, v: unknown) => void) => void)(req, { deadline: Date.now() + deadlineMs }, (err, res) =>
      err ? reject(err) : resolve(res as Record<string, any>),
    );
  });
}

/** What Envoy's ext_proc filter sends for request headers (values in raw_value, Envoy ≥ 1.27). */
export function envoyRequestHeaders(headers: Record<string, string>, useValue = false) {
  return {
    request_headers: {
      headers: {
        headers: Object.entries(headers).map(([key, v]) => (useValue ? { key, value: v } : { key, raw_value: Buffer.from(v) })),
      },
      end_of_stream: true,
    },
  };
}

/** A fetch Response body as JSON, typed for assertions. */
export async function json(res: Response): Promise<any> {
  return res.json();
}

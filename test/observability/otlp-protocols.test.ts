import { afterEach, describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config/load.js';
import { startGateway, type Gateway } from '../../src/gateway.js';
import { MemoryLogSink } from '../../src/observability/logger.js';
import { eventually } from '../helpers/eventually.js';
import { authzClient, check, envoyCheckRequest } from '../helpers/gateway.js';
import { startOtlpReceiver, type OtlpProtocol, type OtlpReceiver } from '../helpers/otlp-receiver.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';

/**
 * The three OTLP protocols, configured as any OpenTelemetry SDK is — by the standard `OTEL_*`
 * environment variables, read through the configuration schema — each exporting to a real receiver of
 * that protocol on loopback: gRPC (a grpc-js `TraceService`), HTTP/protobuf and HTTP/JSON. And the
 * specification's precedence: `OTEL_EXPORTER_OTLP_TRACES_*` over `OTEL_EXPORTER_OTLP_*`.
 */

const open: { close(): Promise<void> }[] = [];
afterEach(async () => {
  for (const o of open.splice(0).reverse()) await o.close();
});

async function receiver(protocol: OtlpProtocol): Promise<OtlpReceiver> {
  const r = await startOtlpReceiver(protocol);
  open.push(r);
  return r;
}

/** A gateway configured from `env` as `sandgate serve` is, answering one ext_authz Check, then closed (which flushes its spans). */
async function oneTracedCheck(env: Record<string, string>): Promise<void> {
  const config = resolveConfig({
    env,
    overrides: { listenHost: '127.0.0.1', grpcPort: 0, adminPort: 0, supervisorPort: 0, proxyPort: 0, relayPort: 0, shutdownTimeoutMs: 1000, gatewayId: 'gw-otlp' },
  });
  const gw: Gateway = await startGateway({ config, drivers: [new TestDriver([snapshot({ name: 'web', sessionModel: 'none', endpoint: { kind: 'address', addresses: ['127.0.0.1'] } })])], logDestination: new MemoryLogSink() });
  const authz = authzClient(`127.0.0.1:${gw.grpcPort}`);
  try {
    expect((await check(authz, envoyCheckRequest({ host: '8000-web.team-a.localhost' }))).status.code).toBe(0);
  } finally {
    authz.close();
    await gw.close();
  }
}

const decisionSpans = (r: OtlpReceiver) => eventually(() => (r.spans.length > 0 ? r.spans : undefined), 10_000, 'the decision span');

describe('OTEL_EXPORTER_OTLP_PROTOCOL', () => {
  for (const protocol of ['grpc', 'http/json', 'http/protobuf'] as const) {
    it(`${protocol}: spans reach a ${protocol} receiver, with the configured headers and resource`, async () => {
      const r = await receiver(protocol);
      await oneTracedCheck({
        OTEL_EXPORTER_OTLP_PROTOCOL: protocol,
        OTEL_EXPORTER_OTLP_ENDPOINT: r.url,
        OTEL_EXPORTER_OTLP_HEADERS: 'x-backend-key=k%201, X-Team = a ',
        OTEL_SERVICE_NAME: 'sandgate-otlp',
        OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment=test,service.name=ignored',
      });
      const [span] = await decisionSpans(r);
      expect(span).toMatchObject({ name: 'sandgate.decision', kind: 2, attributes: { 'sandgate.door': 'ext_authz', 'sandgate.decision.code': 'ok' } });
      expect(span!.resource).toMatchObject({ 'service.name': 'sandgate-otlp', 'service.instance.id': 'gw-otlp', 'deployment.environment': 'test' });
      expect(r.lastHeaders).toMatchObject({ 'x-backend-key': 'k 1', 'x-team': 'a' });
    });
  }
});

describe('OTEL_EXPORTER_OTLP_TRACES_* over OTEL_EXPORTER_OTLP_*', () => {
  it('the traces protocol, endpoint (used as it is) and headers win; the generic endpoint receives nothing', async () => {
    const generic = await receiver('http/protobuf');
    const grpc = await receiver('grpc');
    await oneTracedCheck({
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
      OTEL_EXPORTER_OTLP_ENDPOINT: generic.url,
      OTEL_EXPORTER_OTLP_HEADERS: 'x-a=generic,x-b=generic',
      OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'grpc',
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: grpc.url,
      OTEL_EXPORTER_OTLP_TRACES_HEADERS: 'x-b=traces',
    });
    expect((await decisionSpans(grpc))[0]!.name).toBe('sandgate.decision');
    expect(grpc.lastHeaders).toMatchObject({ 'x-a': 'generic', 'x-b': 'traces' });
    expect(generic.requests).toBe(0);
  });

  it('an HTTP traces endpoint is used as it is: nothing is appended to its path', async () => {
    const json = await receiver('http/json');
    const decoy = await receiver('http/json');
    await oneTracedCheck({
      OTEL_EXPORTER_OTLP_ENDPOINT: decoy.url,
      OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json',
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${json.url}/v1/traces`,
    });
    expect((await decisionSpans(json))[0]!.name).toBe('sandgate.decision');
    expect(decoy.requests).toBe(0);
  });
});

import type { IncomingHttpHeaders } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../helpers/eventually.js';
import { authzClient, check, envoyCheckRequest, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from '../helpers/otlp-receiver.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { startUpstream, text, viaProxy } from '../helpers/upstream.js';

/**
 * Traces, received by a real OTLP/HTTP receiver in the test (protobuf, decoded with the OpenTelemetry
 * protos): the span tree of a proxied request that waited for its sandbox, the decision span of an
 * ext_authz Check, the `traceparent` the sandbox receives, and no credential or query in any span. The
 * callers here are on a trusted address (`--trace-trusted-sources`), so their traces continue
 * (tracing-trust.test.ts has the others). Without the tracing options, tracing is off: no tracer, no
 * exporter, nothing sent.
 */

const TOKEN = 'traffic-token-0123456789abcdef';
const LINK_TOKEN = 'link-token-never-in-a-span';
const INCOMING_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const INCOMING_SPAN = '00f067aa0ba902b7';
const TRACEPARENT = `00-${INCOMING_TRACE}-${INCOMING_SPAN}-01`;
const ENVOY_TRACE = '0af7651916cd43dd8448eb211c80319c';
const ENVOY_SPAN = 'b7ad6b7169203331';

describe('tracing on (OTEL_EXPORTER_OTLP_ENDPOINT set), callers trusted', () => {
  let receiver: OtlpReceiver;
  let upstream: Awaited<ReturnType<typeof startUpstream>>;
  let t: TestGateway;
  let seen: IncomingHttpHeaders | undefined;
  let spans: ReceivedSpan[];

  beforeAll(async () => {
    receiver = await startOtlpReceiver();
    upstream = await startUpstream((req, res) => {
      seen = req.headers;
      res.end('traced');
    });
    const at = { kind: 'address' as const, addresses: ['127.0.0.1'] };
    const later = snapshot({ name: 'later', uid: 'l1', sessionModel: 'none', endpoint: at, accessToken: TOKEN, state: 'starting', conditions: [] });
    const driver = new TestDriver([later]);
    t = await startTestGateway([driver], { readinessWaitMs: 5000, otelExporterOtlpEndpoint: receiver.url, otelServiceName: 'sandgate-under-test', traceTrustedSources: ['127.0.0.1'] });
    const host = `${upstream.port}-later.team-a.localhost`;
    const proxied = viaProxy(t.gw.proxyPort!, { host, path: `/notebook?sandgate_token=${LINK_TOKEN}`, headers: { traceparent: TRACEPARENT, tracestate: 'vendor=1', 'e2b-traffic-access-token': TOKEN } });
    await eventually(() => t.gw.view.waiters.size === 1, 5000, 'the proxied request waiting');
    driver.upsert({ ...later, resourceVersion: '2', state: 'ready', conditions: [{ type: 'Ready', status: 'True', reason: 'DependenciesReady', message: '' }] });
    expect(await text(await proxied)).toBe('traced');
    const authz = authzClient(t.grpcTarget);
    await check(authz, envoyCheckRequest({ host, path: `/x?sandgate_token=${LINK_TOKEN}`, headers: { traceparent: `00-${ENVOY_TRACE}-${ENVOY_SPAN}-01`, 'e2b-traffic-access-token': TOKEN } }));
    authz.close();
    // Closing the gateway exports what the batch processor holds.
    await t.close();
    spans = await eventually(() => (receiver.spans.length >= 5 ? receiver.spans : undefined), 10_000, () => `spans, got ${receiver.spans.map((s) => s.name).join(', ')}`);
  });

  afterAll(async () => {
    await upstream.close();
    await receiver.close();
  });

  it('the proxy continues the incoming trace: a server span under the caller\'s, with decision, wait and upstream children', () => {
    const server = spans.find((s) => s.attributes['sandgate.door'] === 'proxy')!;
    expect(server).toMatchObject({ name: 'GET', kind: 2, traceId: INCOMING_TRACE, parentSpanId: INCOMING_SPAN });
    expect(server.attributes).toMatchObject({
      'http.request.method': 'GET',
      'url.path': '/notebook',
      'http.response.status_code': 200,
      'sandgate.sandbox.namespace': 'team-a',
      'sandgate.sandbox.name': 'later',
      'sandgate.sandbox.port': upstream.port,
      'sandgate.decision.code': 'ok',
      'sandgate.gateway.id': 'gw-test',
    });
    expect(server.resource['service.name']).toBe('sandgate-under-test');
    const children = spans.filter((s) => s.parentSpanId === server.spanId);
    expect(children.map((s) => s.name).sort()).toEqual(['sandgate.decision', 'sandgate.readiness_wait', 'sandgate.upstream']);
    for (const c of children) {
      expect(c.traceId).toBe(INCOMING_TRACE);
      expect(c.start >= server.start && c.end <= server.end, c.name).toBe(true);
    }
    expect(children.find((s) => s.name === 'sandgate.readiness_wait')!.attributes['sandgate.wait.outcome']).toBe('ready');
    const up = children.find((s) => s.name === 'sandgate.upstream')!;
    expect(up).toMatchObject({ kind: 3, attributes: { 'server.address': '127.0.0.1', 'server.port': upstream.port, 'http.response.status_code': 200 } });
  });

  it('the sandbox receives a traceparent of the proxy\'s upstream span, and the caller\'s tracestate', () => {
    const up = spans.find((s) => s.name === 'sandgate.upstream')!;
    expect(seen?.traceparent).toBe(`00-${INCOMING_TRACE}-${up.spanId}-01`);
    expect(seen?.tracestate).toBe('vendor=1');
  });

  it('ext_authz makes a decision span as a child of the traceparent in the checked request', () => {
    const d = spans.find((s) => s.attributes['sandgate.door'] === 'ext_authz')!;
    expect(d).toMatchObject({ name: 'sandgate.decision', kind: 2, traceId: ENVOY_TRACE, parentSpanId: ENVOY_SPAN });
    expect(d.attributes).toMatchObject({ 'sandgate.decision.code': 'ok', 'sandgate.sandbox.name': 'later', 'http.response.status_code': 200, 'client.address': '203.0.113.7:54321' });
  });

  it('no span carries a credential or a query string', () => {
    const all = JSON.stringify(spans, (_k, v: unknown) => (typeof v === 'bigint' ? String(v) : v));
    for (const secret of [TOKEN, LINK_TOKEN, 'sandgate_token']) expect(all).not.toContain(secret);
    for (const s of spans) expect(String(s.attributes['url.path'] ?? '')).not.toContain('?');
  });
});

describe('tracing off (no tracing options)', () => {
  it('makes no tracer and sends nothing; the client\'s traceparent reaches the sandbox untouched', async () => {
    const receiver = await startOtlpReceiver();
    let seen: IncomingHttpHeaders | undefined;
    const upstream = await startUpstream((req, res) => {
      seen = req.headers;
      res.end('plain');
    });
    const t = await startTestGateway([new TestDriver([snapshot({ name: 'web', sessionModel: 'none', endpoint: { kind: 'address', addresses: ['127.0.0.1'] } })])]);
    try {
      expect(t.gw.tracing).toBeUndefined();
      const r = await viaProxy(t.gw.proxyPort!, { host: `${upstream.port}-web.team-a.localhost`, headers: { traceparent: TRACEPARENT } });
      expect(await text(r)).toBe('plain');
      expect(seen?.traceparent).toBe(TRACEPARENT);
    } finally {
      await t.close();
      await upstream.close();
    }
    expect(receiver.requests).toBe(0);
    await receiver.close();
  });
});

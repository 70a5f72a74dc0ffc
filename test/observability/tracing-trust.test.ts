import type { IncomingHttpHeaders } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually } from '../helpers/eventually.js';
import { authzClient, check, envoyCheckRequest, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { startOtlpReceiver, type OtlpReceiver } from '../helpers/otlp-receiver.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { startUpstream, text, viaProxy } from '../helpers/upstream.js';

/**
 * Who may decide a trace (`--trace-trusted-sources`). Under `parentbased_traceidratio` with ratio 0, a
 * `traceparent` flagged sampled is honoured only over a connection from a trusted address: from anyone
 * else nothing is exported, at the proxy, HTTP authz and ext_authz alike (checked after the gateway's
 * close has flushed its exporter, so "nothing" is a settled fact, not a wait that ran out). A caller
 * that is not trusted never continues its own trace id either: its request starts a trace of the
 * gateway's, with a span link to the one it came with, and the sandbox gets the gateway's trace.
 */

const TOKEN = 'traffic-token-0123456789abcdef';
const INCOMING_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736';
const INCOMING_SPAN = '00f067aa0ba902b7';
const flagged = (i: number): string => `00-${INCOMING_TRACE}-${INCOMING_SPAN.slice(0, 14)}${i.toString(16).padStart(2, '0')}-01`;
const RATIO_ZERO = { otelTracesSampler: 'parentbased_traceidratio', otelTracesSamplerArg: '0' };

let upstream: Awaited<ReturnType<typeof startUpstream>>;
let seen: IncomingHttpHeaders[] = [];

beforeAll(async () => {
  upstream = await startUpstream((req, res) => {
    seen.push(req.headers);
    res.end('ok');
  });
});
afterAll(() => upstream.close());

async function gateway(receiver: OtlpReceiver, overrides: Record<string, unknown>): Promise<TestGateway> {
  const sandbox = snapshot({ name: 'web', sessionModel: 'none', endpoint: { kind: 'address', addresses: ['127.0.0.1'] }, accessToken: TOKEN });
  return startTestGateway([new TestDriver([sandbox])], { otelExporterOtlpEndpoint: receiver.url, ...overrides });
}

/** 20 requests carrying a sampled `traceparent`: through the proxy, HTTP authz and ext_authz. */
async function sendFlagged(t: TestGateway): Promise<void> {
  const host = `${upstream.port}-web.team-a.localhost`;
  const authz = authzClient(t.grpcTarget);
  try {
    for (let i = 0; i < 20; i++) {
      const headers = { traceparent: flagged(i), 'e2b-traffic-access-token': TOKEN };
      if (i % 3 === 0) expect(await text(await viaProxy(t.gw.proxyPort!, { host, headers }))).toBe('ok');
      else if (i % 3 === 1) expect((await fetch(`${t.admin}/authz/`, { headers: { ...headers, 'x-sandbox-id': 'web', 'x-sandbox-namespace': 'team-a', 'x-sandbox-port': String(upstream.port) } })).status).toBe(200);
      else expect((await check(authz, envoyCheckRequest({ host, headers }))).status.code).toBe(0);
    }
  } finally {
    authz.close();
  }
}

describe('ratio 0 and a client traceparent flagged sampled', () => {
  it('from an address not trusted: nothing is exported', async () => {
    const receiver = await startOtlpReceiver();
    const t = await gateway(receiver, { ...RATIO_ZERO, traceTrustedSources: ['192.0.2.0/24', '2001:db8::/32'] });
    try {
      await sendFlagged(t);
    } finally {
      // Closing the gateway flushes its span processor and waits for the export to finish.
      await t.close();
    }
    expect(receiver.spans).toEqual([]);
    expect(receiver.requests).toBe(0);
    await receiver.close();
  });

  it('from a trusted address: its decision is honoured, and every request is exported in its trace', async () => {
    const receiver = await startOtlpReceiver();
    const t = await gateway(receiver, { ...RATIO_ZERO, traceTrustedSources: ['10.0.0.0/8', '127.0.0.0/8'] });
    try {
      await sendFlagged(t);
    } finally {
      await t.close();
    }
    const servers = await eventually(() => {
      const s = receiver.spans.filter((x) => x.kind === 2);
      return s.length >= 20 ? s : undefined;
    }, 10_000, () => `20 server spans, got ${receiver.spans.length} spans`);
    expect(servers).toHaveLength(20);
    expect(new Set(servers.map((s) => s.attributes['sandgate.door']))).toEqual(new Set(['proxy', 'http_authz', 'ext_authz']));
    for (const s of servers) {
      expect(s.traceId).toBe(INCOMING_TRACE);
      expect(s.parentSpanId.slice(0, 14)).toBe(INCOMING_SPAN.slice(0, 14));
      expect(s.links).toEqual([]);
    }
    await receiver.close();
  });
});

describe('a caller that is not trusted', () => {
  it('does not continue its trace id: the gateway starts its own, links the incoming one, and samples by its own sampler', async () => {
    const receiver = await startOtlpReceiver();
    const t = await gateway(receiver, {});
    seen = [];
    const host = `${upstream.port}-web.team-a.localhost`;
    const unsampled = `00-${INCOMING_TRACE}-${INCOMING_SPAN}-00`;
    try {
      expect(await text(await viaProxy(t.gw.proxyPort!, { host, headers: { traceparent: flagged(0), 'e2b-traffic-access-token': TOKEN } }))).toBe('ok');
      // Nor can it turn tracing off for its requests: parentbased_always_on samples the gateway's new trace.
      expect(await text(await viaProxy(t.gw.proxyPort!, { host, headers: { traceparent: unsampled, 'e2b-traffic-access-token': TOKEN } }))).toBe('ok');
      // A traceparent that does not parse (an all-zero trace id is invalid, W3C Trace Context §3.2.2.3) links nothing.
      expect(await text(await viaProxy(t.gw.proxyPort!, { host, headers: { traceparent: `00-${'0'.repeat(32)}-${INCOMING_SPAN}-01`, 'e2b-traffic-access-token': TOKEN } }))).toBe('ok');
    } finally {
      await t.close();
    }
    const servers = await eventually(() => {
      const s = receiver.spans.filter((x) => x.kind === 2);
      return s.length >= 3 ? s : undefined;
    }, 10_000, 'three server spans');
    const linked = servers.filter((s) => s.links.length > 0);
    expect(linked.map((s) => s.links[0]!.spanId).sort()).toEqual([flagged(0).split('-')[2], INCOMING_SPAN].sort());
    for (const s of linked) expect(s.links).toEqual([{ traceId: INCOMING_TRACE, spanId: s.links[0]!.spanId }]);
    for (const s of servers) {
      expect(s.traceId).not.toBe(INCOMING_TRACE);
      expect(s.parentSpanId).toBe('');
      const up = receiver.spans.find((x) => x.name === 'sandgate.upstream' && x.parentSpanId === s.spanId)!;
      expect(seen.map((h) => h.traceparent)).toContain(`00-${s.traceId}-${up.spanId}-01`);
    }
    expect(new Set(servers.map((s) => s.traceId)).size).toBe(3);
    await receiver.close();
  });
});

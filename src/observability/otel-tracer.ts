import { performance } from 'node:perf_hooks';
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, TraceFlags, type Attributes, type Context, type Link, type Span, type Tracer } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { resourceFromAttributes } from '@opentelemetry/resources';
import { AlwaysOffSampler, AlwaysOnSampler, BasicTracerProvider, BatchSpanProcessor, ParentBasedSampler, TraceIdRatioBasedSampler, type Sampler, type SpanExporter } from '@opentelemetry/sdk-trace-base';
import type { Exchange, ExchangeRequest, ExchangeTrace, ExchangeTracer } from './exchange.js';
import type { TracingSettings } from './tracing.js';

/**
 * Tracing with the OpenTelemetry SDK, as the configuration resolved it (tracing.ts): this module is loaded
 * only when tracing is on. The sampler, the resource, the batch span processor and the exporter
 * (otel-exporter.ts) are all built from those settings; the SDK reads no option of its own.
 *
 * Spans are made from the exchange record (exchange.ts), not by the doors: a request's server span starts
 * with its record; the upstream span starts when the request leaves, so its context can ride in the
 * `traceparent` sent to the sandbox; the decision and readiness-wait spans are made from the record's
 * timings when it ends. At the authorization doors (ext_authz, ext_proc, HTTP authz) the request's span
 * is the decision itself. Attributes follow the OpenTelemetry HTTP semantic conventions plus `sandgate.*`;
 * none is a header, a credential or a query string. The provider is sandgate's own, not registered
 * globally, so several gateways in one process keep theirs apart.
 *
 * An incoming W3C `traceparent` is a parent only when the connection it came on is from a trusted
 * address (`--trace-trusted-sources`: Envoy, nginx, peer gateways): then its trace continues and, with a
 * `parentbased_*` sampler, its sampled flag decides. From anyone else it would let a client choose the
 * trace id and force every request of its own to be exported whatever the ratio, so the request starts a
 * trace of its own, sampled by the gateway's sampler, and the incoming context is kept as a span link.
 */

const propagator = new W3CTraceContextPropagator();
const getter = {
  keys: (h: Readonly<Record<string, string | undefined>>) => Object.keys(h),
  get: (h: Readonly<Record<string, string | undefined>>, key: string) => h[key],
};

const epoch = (t: number): number => performance.timeOrigin + t;

/** `host:port` (or `[v6]:port`) as semantic-convention `server.address` / `server.port`. */
function hostAttributes(hostPort: string): Attributes {
  const colon = hostPort.lastIndexOf(':');
  const port = Number(hostPort.slice(colon + 1));
  if (colon <= 0 || !Number.isInteger(port)) return { 'server.address': hostPort };
  return { 'server.address': hostPort.slice(0, colon).replace(/^\[(.*)\]$/, '$1'), 'server.port': port };
}

/** A traceparent header value (W3C Trace Context §3.2) for `span`. */
function traceparentOf(span: Span): string {
  const c = span.spanContext();
  return `00-${c.traceId}-${c.spanId}-${(c.traceFlags & TraceFlags.SAMPLED) !== 0 ? '01' : '00'}`;
}

class RequestTrace implements ExchangeTrace {
  private upstream: Span | undefined;
  private readonly inside: Context;

  constructor(
    private readonly tracing: Tracing,
    private readonly span: Span,
  ) {
    this.inside = trace.setSpan(ROOT_CONTEXT, span);
  }

  get traceId(): string {
    return this.span.spanContext().traceId;
  }

  upstreamStarted(x: Exchange): string | undefined {
    if (!this.span.isRecording()) return traceparentOf(this.span);
    const attributes: Attributes = { 'http.request.method': x.method, ...hostAttributes(x.upstreamHost ?? '') };
    this.upstream = this.tracing.tracer.startSpan('sandgate.upstream', { kind: SpanKind.CLIENT, attributes, startTime: epoch(x.upstreamStart) }, this.inside);
    return traceparentOf(this.upstream);
  }

  end(x: Exchange): void {
    const span = this.span;
    if (!span.isRecording()) return span.end();
    const tracer = this.tracing.tracer;
    const authz = x.door !== 'proxy' && x.door !== 'relay';
    if (!authz && x.decisionEnd !== 0) {
      tracer.startSpan('sandgate.decision', { startTime: epoch(x.decisionStart), attributes: { 'sandgate.decision.code': x.code } }, this.inside).end(epoch(x.decisionEnd));
    }
    if (x.waitStart !== 0) {
      const wait = tracer.startSpan('sandgate.readiness_wait', { startTime: epoch(x.waitStart), attributes: { 'sandgate.wait.outcome': x.waitOutcome ?? 'unknown' } }, this.inside);
      wait.end(epoch(x.waitEnd || x.endTime));
    }
    const up = this.upstream;
    if (up !== undefined) {
      if (x.upstreamHead !== 0) up.setAttribute('http.response.status_code', x.upstreamStatus);
      else up.setStatus({ code: SpanStatusCode.ERROR, message: x.code });
      up.end(epoch(x.upstreamHead || x.endTime));
    }
    const attributes: Attributes = {
      'http.response.status_code': x.status,
      'sandgate.decision.code': x.code,
      'sandgate.gateway.id': this.tracing.gatewayId,
    };
    if (x.namespace !== undefined) attributes['sandgate.sandbox.namespace'] = x.namespace;
    if (x.name !== undefined) attributes['sandgate.sandbox.name'] = x.name;
    if (x.port !== undefined) attributes['sandgate.sandbox.port'] = x.port;
    if (x.tenant !== undefined) attributes['sandgate.tenant'] = x.tenant;
    if (x.policy !== undefined) attributes['sandgate.access.policy'] = x.policy;
    span.setAttributes(attributes);
    // HTTP semantic conventions: a server span is an error for 5xx (and for no answer at all), not 4xx.
    if (x.status >= 500 || x.status === 0) {
      span.setAttribute('error.type', x.status === 0 ? x.code : String(x.status));
      span.setStatus({ code: SpanStatusCode.ERROR, message: x.code });
    }
    span.end(epoch(x.endTime));
  }
}

function sampler(s: TracingSettings): Sampler {
  const root = s.sampler.endsWith('always_on') ? new AlwaysOnSampler() : s.sampler.endsWith('always_off') ? new AlwaysOffSampler() : new TraceIdRatioBasedSampler(s.ratio);
  return s.sampler.startsWith('parentbased_') ? new ParentBasedSampler({ root }) : root;
}

/** The gateway's tracer: an SDK provider of its own, a batch span processor and the configured OTLP exporter. */
export class Tracing implements ExchangeTracer {
  readonly tracer: Tracer;
  private readonly provider: BasicTracerProvider;
  private readonly trusted: (address: string) => boolean;

  constructor(settings: TracingSettings, readonly gatewayId: string, exporter: SpanExporter) {
    const resource = resourceFromAttributes({ 'service.name': 'sandgate', 'service.instance.id': gatewayId, ...settings.resource });
    this.provider = new BasicTracerProvider({ resource, sampler: sampler(settings), spanProcessors: [new BatchSpanProcessor(exporter, settings.batch)] });
    this.tracer = this.provider.getTracer('sandgate');
    this.trusted = settings.trusted;
  }

  begin(x: Exchange, req: ExchangeRequest): ExchangeTrace {
    let parent = ROOT_CONTEXT;
    let links: Link[] | undefined;
    if (req.headers.traceparent !== undefined) {
      const incoming = propagator.extract(ROOT_CONTEXT, req.headers, getter);
      if (this.trusted(req.peer)) parent = incoming;
      else {
        const context = trace.getSpanContext(incoming);
        if (context !== undefined) links = [{ context }];
      }
    }
    const authz = x.door !== 'proxy' && x.door !== 'relay';
    const attributes: Attributes = { 'http.request.method': x.method, 'url.path': x.path, 'sandgate.door': x.door };
    if (x.client !== '') attributes['client.address'] = x.client;
    const name = authz ? 'sandgate.decision' : x.method;
    const span = this.tracer.startSpan(name, { kind: SpanKind.SERVER, attributes, links, startTime: epoch(x.t0) }, parent);
    return new RequestTrace(this, span);
  }

  /** Exports what is buffered, then stops. */
  close(): Promise<void> {
    return this.provider.shutdown();
  }
}


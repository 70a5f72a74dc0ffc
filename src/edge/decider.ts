import { performance } from 'node:perf_hooks';
import { decide, deny, type Decision, type Deny } from '../domain/decide.js';
import type { RouteOptions, RouteRequest } from '../domain/route-key.js';
import { sandboxKey } from '../domain/sandbox.js';
import type { Logger } from '../observability/logger.js';
import type { Door, GatewayMetrics } from '../observability/metrics.js';
import type { SandboxView } from '../view/sandbox-view.js';

/**
 * The front doors' shared use of decide(): it times and counts every decision and, for a sandbox in a
 * short readiness gap, waits for the view to change (not polling) up to the readiness wait, deciding again
 * on each change of that sandbox.
 */
export class Decider {
  constructor(
    readonly view: SandboxView,
    readonly route: RouteOptions,
    readonly readinessWaitMs: number,
    private readonly metrics: GatewayMetrics,
    private readonly log: Logger,
  ) {}

  /** Decides at once. When `shouldWait(d)`, the door calls wait() and answers with its result instead. */
  decide(door: Door, req: RouteRequest): Decision {
    const t0 = performance.now();
    const d = decide(this.view, this.route, req);
    const seconds = (performance.now() - t0) / 1000;
    if (this.shouldWait(d)) this.metrics.observeLatency(door, seconds);
    else this.settle(door, d, req, seconds);
    return d;
  }

  shouldWait(d: Decision): d is Deny {
    return !d.allow && d.waitable && this.readinessWaitMs > 0;
  }

  /** Waits for the sandbox named by `first` to change, re-deciding each time, until allowed, final or timed out. */
  async wait(door: Door, req: RouteRequest, first: Deny, signal?: AbortSignal): Promise<Decision> {
    const key = sandboxKey(first.namespace!, first.name!);
    const deadline = performance.now() + this.readinessWaitMs;
    let d: Decision = first;
    let outcome = 'timeout';
    for (;;) {
      const left = deadline - performance.now();
      if (left <= 0) break;
      const r = await this.view.waiters.wait(key, left, signal);
      if (r === 'busy') {
        d = deny('gateway_busy', undefined, undefined, 1);
        outcome = r;
        break;
      }
      if (r !== 'changed') {
        outcome = r;
        if (r !== 'timeout') d = decide(this.view, this.route, req);
        break;
      }
      d = decide(this.view, this.route, req);
      if (!this.shouldWait(d)) {
        outcome = d.allow ? 'ready' : 'final';
        break;
      }
    }
    this.metrics.waits.labels(outcome).inc();
    this.settle(door, d, req, undefined);
    return d;
  }

  private settle(door: Door, d: Decision, req: RouteRequest, seconds: number | undefined): void {
    this.metrics.decision(door, d.allow ? undefined : d.code, seconds);
    if (d.allow) {
      if (this.log.isLevelEnabled('debug')) {
        this.log.debug({ door, requestId: req.headers['x-request-id'], sandbox: d.entry.namespace + '/' + d.entry.name, upstream: d.upstream }, 'allow');
      }
    } else if (d.status >= 500 && d.code !== 'sandbox_not_ready' && d.code !== 'gateway_not_ready') {
      this.log.error({ door, requestId: req.headers['x-request-id'], code: d.code, sandbox: d.namespace && d.namespace + '/' + d.name, reason: d.reason }, d.message);
    } else if (this.log.isLevelEnabled('debug')) {
      this.log.debug({ door, requestId: req.headers['x-request-id'], code: d.code, status: d.status, sandbox: d.namespace && d.namespace + '/' + d.name }, d.message);
    }
  }
}

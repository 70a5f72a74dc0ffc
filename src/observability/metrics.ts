import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { ERROR_CODES } from '../domain/errors.js';
import { PUBLIC_PHASES } from '../domain/sandbox.js';

/**
 * The gateway's Prometheus metrics, on a registry of its own (several gateways can share a process in
 * tests). Names follow `sandgate_<part>_<what>_<unit>`; labels are bounded sets (door, outcome, code,
 * phase) — never a sandbox name.
 */

export type Door = 'ext_authz' | 'ext_proc' | 'http_authz' | 'proxy';
export const DOORS: readonly Door[] = ['ext_authz', 'ext_proc', 'http_authz', 'proxy'];

type Child = { inc(): void };
const ALLOW = '';

export class GatewayMetrics {
  readonly registry = new Registry();
  private readonly decisions: Counter<'door' | 'outcome' | 'code'>;
  private readonly latency: Histogram<'door'>;
  private readonly children = new Map<Door, Map<string, Child>>();
  private readonly latencyChildren = new Map<Door, { observe(v: number): void }>();
  readonly waits: Counter<'outcome'>;
  readonly driverEvents: Counter<'driver' | 'result'>;
  readonly driverErrors: Counter<'driver'>;

  constructor(view: { readonly size: number; phaseCounts(): Map<string, number> }, defaults = true) {
    const registers = [this.registry];
    if (defaults) collectDefaultMetrics({ register: this.registry, prefix: 'sandgate_process_' });
    this.decisions = new Counter({
      name: 'sandgate_edge_decisions_total',
      help: 'Routing decisions by front door, outcome (allow/deny) and error code',
      labelNames: ['door', 'outcome', 'code'],
      registers,
    });
    this.latency = new Histogram({
      name: 'sandgate_edge_decision_duration_seconds',
      help: 'Time to decide a request, excluding any readiness wait',
      labelNames: ['door'],
      buckets: [1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 1e-3, 1e-2],
      registers,
    });
    this.waits = new Counter({
      name: 'sandgate_edge_readiness_waits_total',
      help: 'Readiness waits by outcome (ready, timeout, busy, closed, aborted)',
      labelNames: ['outcome'],
      registers,
    });
    this.driverEvents = new Counter({
      name: 'sandgate_drivers_events_total',
      help: 'Driver events applied to the view, by driver and result (applied, stale)',
      labelNames: ['driver', 'result'],
      registers,
    });
    this.driverErrors = new Counter({
      name: 'sandgate_drivers_errors_total',
      help: 'Driver errors (bad files, dropped watches), by driver',
      labelNames: ['driver'],
      registers,
    });
    new Gauge({
      name: 'sandgate_view_sandboxes',
      help: 'Sandboxes in the view',
      registers,
      collect() {
        this.set(view.size);
      },
    });
    new Gauge({
      name: 'sandgate_view_sandboxes_by_phase',
      help: 'Sandboxes in the view by public phase',
      labelNames: ['phase'],
      registers,
      collect() {
        const counts = view.phaseCounts();
        for (const phase of PUBLIC_PHASES) this.set({ phase }, counts.get(phase) ?? 0);
      },
    });
    // Pre-create every series so dashboards see zeros and the hot path never formats label sets.
    for (const door of DOORS) {
      this.latencyChildren.set(door, this.latency.labels(door));
      const byCode = new Map<string, Child>([[ALLOW, this.decisions.labels(door, 'allow', 'ok')]]);
      for (const code of Object.keys(ERROR_CODES)) byCode.set(code, this.decisions.labels(door, 'deny', code));
      this.children.set(door, byCode);
    }
  }

  /** Exposes supervisor session counts (read at scrape time; sessions know nothing of metrics). */
  watchSessions(source: {
    readonly size: number;
    readonly connections: number;
    readonly closes: ReadonlyMap<number, number>;
    readonly relay: { readonly active: number };
  }): void {
    const registers = [this.registry];
    new Gauge({
      name: 'sandgate_relay_streams',
      help: 'Relay streams open or opening over this gateway\'s supervisor sessions',
      registers,
      collect() {
        this.set(source.relay.active);
      },
    });
    new Gauge({
      name: 'sandgate_sessions_active',
      help: 'Supervisor sessions accepted on this gateway',
      registers,
      collect() {
        this.set(source.size);
      },
    });
    new Gauge({
      name: 'sandgate_sessions_connections',
      help: 'Supervisor sockets open on this gateway, including those before hello',
      registers,
      collect() {
        this.set(source.connections);
      },
    });
    new Counter({
      name: 'sandgate_sessions_closes_total',
      help: 'Supervisor sockets closed, by WebSocket close code',
      labelNames: ['code'],
      registers,
      collect() {
        // The server keeps the running totals; mirror them at scrape time.
        this.reset();
        for (const [code, n] of source.closes) this.labels(String(code)).inc(n);
      },
    });
  }

  /** Counts one final decision (`code` undefined for an allow) and, when given, its decision time. */
  decision(door: Door, code: string | undefined, seconds?: number): void {
    this.children.get(door)?.get(code ?? ALLOW)?.inc();
    if (seconds !== undefined) this.observeLatency(door, seconds);
  }

  observeLatency(door: Door, seconds: number): void {
    this.latencyChildren.get(door)?.observe(seconds);
  }
}

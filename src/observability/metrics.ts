import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { IndexedHistogram, SlotCounter } from './fast-metrics.js';
import { ERROR_CODES } from '../domain/errors.js';
import { PAUSE_RESULTS, PUBLIC_PHASES, type PauseResult } from '../domain/sandbox.js';
import { COUNTED_CLOSE_CODES } from '../sessions/supervisor-protocol.js';
import { GUARDED_LISTENERS, type ListenerGuards } from '../lib/connection-guard.js';

/**
 * The gateway's Prometheus metrics, on a registry of its own (several gateways can share a process in
 * tests). sandgate's own follow `sandgate_<part>_<what>_<unit>`; the process and runtime metrics keep the
 * standard names dashboards expect (`process_cpu_seconds_total`, `nodejs_eventloop_lag_seconds`, …).
 * Labels are bounded sets (door, outcome, code, phase) — never a sandbox name — and each help text lists
 * the values its labels take. docs/operations.md lists every metric; a test keeps the two in step.
 */

/** Readiness wait outcomes: the waiter's own (timeout, busy, closed, aborted) or what the wait ended in. */
export const WAIT_OUTCOMES = ['ready', 'final', 'timeout', 'busy', 'closed', 'aborted', 'resume_failed'] as const;
export type WaitOutcomeLabel = (typeof WAIT_OUTCOMES)[number];
export const DRIVER_RESULTS = ['applied', 'stale', 'resync'] as const;

export type Door = 'ext_authz' | 'ext_proc' | 'http_authz' | 'proxy';
export const DOORS: readonly Door[] = ['ext_authz', 'ext_proc', 'http_authz', 'proxy'];

const CODES = Object.keys(ERROR_CODES);
const CODE_INDEX = new Map(CODES.map((c, i) => [c, i]));
const SLOTS_PER_DOOR = 1 + CODES.length;
const DOOR_INDEX: Readonly<Record<Door, number>> = { ext_authz: 0, ext_proc: 1, http_authz: 2, proxy: 3 };

/** A gauge set, when scraped, to what `read` returns: its source keeps the value, not the metrics. */
function scrapedGauge(registry: Registry, name: string, help: string, read: () => number): void {
  new Gauge({
    name,
    help,
    registers: [registry],
    collect() {
      this.set(read());
    },
  });
}

/** A counter set, when scraped, to the running total `read` returns: its source keeps the count. */
function mirroredCounter(registry: Registry, name: string, help: string, read: () => number): void {
  new Counter({
    name,
    help,
    registers: [registry],
    collect() {
      this.reset();
      this.inc(read());
    },
  });
}

/** The listeners whose handlers run under the request guard (lib/request-guard.ts). */
export const LISTENERS = ['proxy', 'relay', 'admin', 'ops', 'supervisor'] as const;
export type ListenerLabel = (typeof LISTENERS)[number];

/** What the h2c gauges read of an HTTP/2 upstream pool (forwarding/h2c-pool.ts). */
export interface H2cPoolGauges {
  readonly sessions: number;
  readonly streams: number;
  readonly refused: number;
}

export class GatewayMetrics {
  readonly registry = new Registry();
  private readonly decisions: SlotCounter;
  private readonly latency: IndexedHistogram;
  private readonly waits: Counter<'outcome'>;
  readonly driverEvents: Counter<'driver' | 'result'>;
  private readonly driverEventTallies: { readonly child: { inc(n: number): void }; count: number }[] = [];
  readonly driverErrors: Counter<'driver'>;
  /** Ids refused to a sandbox (squatting or a collision), by driver and reason. */
  readonly refusedIds: Counter<'driver' | 'reason'>;
  private readonly handlerErrorsTotal: Counter<'listener'>;
  /** The pools watchH2c() sums. */
  private readonly h2cPools: H2cPoolGauges[] = [];
  /** Certificate pairs (re)loaded, failed to load (the last good pair serves on) or removed, by result. */
  readonly tlsReloads: Counter<'result'>;

  constructor(
    view: { readonly size: number; phaseCounts(): Map<string, number>; refusedIdCounts(): Readonly<Record<string, number>> },
    defaults = true,
  ) {
    const registers = [this.registry];
    if (defaults) collectDefaultMetrics({ register: this.registry, eventLoopMonitoringPrecision: 100 });
    // Every (door, outcome, code) series exists from the start: dashboards see zeros, and the hot path
    // adds to a slot instead of formatting a label set.
    this.decisions = new SlotCounter(
      this.registry,
      'sandgate_edge_decisions_total',
      `Routing decisions by door (${DOORS.join(', ')}), outcome (allow, deny) and code (ok for an allow; a deny's error code, docs/errors.md)`,
      DOORS.flatMap((door) => [{ door, outcome: 'allow', code: 'ok' }, ...CODES.map((code) => ({ door, outcome: 'deny', code }))]),
    );
    this.latency = new IndexedHistogram(
      this.registry,
      'sandgate_edge_decision_duration_seconds',
      `Time to decide a request, excluding any readiness wait, by door (${DOORS.join(', ')})`,
      'door',
      DOORS,
      [1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 1e-3, 1e-2],
    );
    this.waits = new Counter({
      name: 'sandgate_edge_readiness_waits_total',
      help: `Readiness waits by outcome (${WAIT_OUTCOMES.join(', ')})`,
      labelNames: ['outcome'],
      registers,
    });
    const tallies = this.driverEventTallies;
    this.driverEvents = new Counter({
      name: 'sandgate_drivers_events_total',
      help: `Driver events by driver (its id: file, kubernetes/<kind>, grpc/<name>) and result (${DRIVER_RESULTS.join(', ')})`,
      labelNames: ['driver', 'result'],
      registers,
      // Events counted on the hot path (driverEventCounter) reach the counter when it is read.
      collect() {
        for (const t of tallies) {
          if (t.count === 0) continue;
          t.child.inc(t.count);
          t.count = 0;
        }
      },
    });
    this.driverErrors = new Counter({
      name: 'sandgate_drivers_errors_total',
      help: 'Driver errors (bad files, dropped watches, invalid driver messages), by driver (file, kubernetes/<kind>, grpc/<name>)',
      labelNames: ['driver'],
      registers,
    });
    this.tlsReloads = new Counter({
      name: 'sandgate_tls_reloads_total',
      help: 'TLS certificate pairs read by result: loaded, failed (the last good pair keeps serving; /readyz is degraded), removed',
      labelNames: ['result'],
      registers,
    });
    for (const result of ['loaded', 'failed', 'removed']) this.tlsReloads.labels(result).inc(0);
    this.refusedIds = new Counter({
      name: 'sandgate_drivers_refused_ids_total',
      help: 'Ids a sandbox declared and was refused, by driver and reason (in_use, names_another_sandbox)',
      labelNames: ['driver', 'reason'],
      registers,
    });
    this.handlerErrorsTotal = new Counter({
      name: 'sandgate_http_handler_errors_total',
      help: `Exceptions while handling one request, which ended that request (500, or the connection cut) and not the process, by listener (${LISTENERS.join(', ')})`,
      labelNames: ['listener'],
      registers,
    });
    for (const l of LISTENERS) this.handlerErrorsTotal.labels(l);
    new Gauge({
      name: 'sandgate_view_refused_ids',
      help: 'Id claims refused right now, by reason (in_use, names_another_sandbox)',
      labelNames: ['reason'],
      registers,
      collect() {
        for (const [reason, n] of Object.entries(view.refusedIdCounts())) this.set({ reason }, n);
      },
    });
    scrapedGauge(this.registry, 'sandgate_view_sandboxes', 'Sandboxes in the view', () => view.size);
    new Gauge({
      name: 'sandgate_view_sandboxes_by_phase',
      help: `Sandboxes in the view by public phase (${PUBLIC_PHASES.join(', ')})`,
      labelNames: ['phase'],
      registers,
      collect() {
        const counts = view.phaseCounts();
        for (const phase of PUBLIC_PHASES) this.set({ phase }, counts.get(phase) ?? 0);
      },
    });
  }

  /** Exposes the watch streams' counts (read at scrape time). */
  watchWatchers(source: { readonly watchers: number; readonly serialized: number; readonly dropped: number }): void {
    scrapedGauge(this.registry, 'sandgate_api_watchers', 'Watch streams (/v1/sandboxes/watch) open on this gateway', () => source.watchers);
    mirroredCounter(this.registry, 'sandgate_api_watch_changes_serialized_total', 'View changes serialized for watch streams: once per change, shared by every watcher that may see it', () => source.serialized);
    mirroredCounter(this.registry, 'sandgate_api_watchers_dropped_total', 'Watch streams dropped for falling more than --watch-max-buffer-bytes behind', () => source.dropped);
  }

  /** Exposes supervisor session counts (read at scrape time; sessions know nothing of metrics). */
  watchSessions(source: {
    readonly size: number;
    readonly connections: number;
    readonly closes: ReadonlyMap<string, number>;
    readonly relay: { readonly active: number };
    readonly moves: ReadonlyMap<string, number>;
    oldestSilenceMs(): number;
  }): void {
    const registers = [this.registry];
    scrapedGauge(
      this.registry,
      'sandgate_sessions_heartbeat_age_seconds',
      'Age of the oldest unanswered heartbeat: the longest any accepted supervisor session here has been silent (dropped at --heartbeat-misses intervals)',
      () => source.oldestSilenceMs() / 1000,
    );
    new Counter({
      name: 'sandgate_sessions_moves_total',
      help: 'Supervisors this gateway asked to move their session elsewhere, by reason (rebalance, drain)',
      labelNames: ['reason'],
      registers,
      collect() {
        this.reset();
        for (const [reason, n] of source.moves) this.labels(reason).inc(n);
      },
    });
    scrapedGauge(this.registry, 'sandgate_relay_streams', 'Relay streams open or opening over this gateway\'s supervisor sessions', () => source.relay.active);
    scrapedGauge(this.registry, 'sandgate_sessions_active', 'Supervisor sessions accepted on this gateway', () => source.size);
    scrapedGauge(this.registry, 'sandgate_sessions_connections', 'Supervisor sockets open on this gateway, including those before hello', () => source.connections);
    new Counter({
      name: 'sandgate_sessions_closes_total',
      help: `Supervisor sockets closed, by WebSocket close code, whichever side closed (${COUNTED_CLOSE_CODES.join(', ')}, other)`,
      labelNames: ['code'],
      registers,
      collect() {
        // The server keeps the running totals; mirror them at scrape time.
        this.reset();
        for (const [code, n] of source.closes) this.labels(code).inc(n);
      },
    });
  }

  /**
   * Exposes every listener's open connections and those refused at its cap (connection-guard.ts), read at
   * scrape time, labelled by listener: only the listeners this gateway runs.
   */
  watchListeners(guards: ListenerGuards): void {
    const registers = [this.registry];
    const listeners = GUARDED_LISTENERS.join(', ');
    new Gauge({
      name: 'sandgate_listener_connections',
      help: `Connections open on each listener (${listeners})`,
      labelNames: ['listener'],
      registers,
      collect() {
        for (const g of guards.list()) this.set({ listener: g.listener }, g.open);
      },
    });
    new Counter({
      name: 'sandgate_listener_connections_refused_total',
      help: `Connections closed at accept because their listener held --max-connections, by listener (${listeners})`,
      labelNames: ['listener'],
      registers,
      collect() {
        this.reset();
        for (const g of guards.list()) this.labels(g.listener).inc(g.refused);
      },
    });
  }

  /**
   * Exposes the HTTP/2 sessions to h2c sandbox ports of every pool given (the embedded proxy's, the relay
   * listener's), summed, read at scrape time; the pools know nothing of metrics. No label: a pool is keyed
   * by upstream, and an upstream is a tenant's to multiply.
   */
  watchH2c(pool: H2cPoolGauges): void {
    const pools = this.h2cPools;
    pools.push(pool);
    if (pools.length > 1) return;
    const sum = (of: (p: H2cPoolGauges) => number): number => pools.reduce((n, p) => n + of(p), 0);
    scrapedGauge(this.registry, 'sandgate_proxy_h2c_sessions', 'HTTP/2 connections open or opening from the embedded proxy and the relay listener to h2c sandbox ports', () => sum((p) => p.sessions));
    scrapedGauge(this.registry, 'sandgate_proxy_h2c_streams', 'Streams open or opening on the HTTP/2 connections of the embedded proxy and the relay listener to h2c sandbox ports', () => sum((p) => p.streams));
    mirroredCounter(this.registry, 'sandgate_proxy_h2c_refused_total', 'Requests to h2c sandbox ports refused (429 too_many_connections, gRPC RESOURCE_EXHAUSTED) because every connection to their port carried --h2c-max-streams-per-session and the port had --h2c-max-sessions-per-upstream', () => sum((p) => p.refused));
  }

  /**
   * Exposes what `/readyz` answers, read at scrape time: `sandgate_readiness_state` one-hot over ready,
   * degraded and not_ready (alerts need it without probing), and per Redis user whether it is degraded.
   */
  watchReadiness(source: {
    notReady(): readonly string[];
    readonly presenceDegraded: () => readonly string[];
    readonly keysDegraded: () => readonly string[];
    readonly tlsDegraded?: () => readonly string[];
  }): void {
    const registers = [this.registry];
    new Gauge({
      name: 'sandgate_readiness_state',
      help: 'What /readyz answers: 1 for the current state (ready, degraded, not_ready), 0 for the others',
      labelNames: ['state'],
      registers,
      collect() {
        const notReady = source.notReady().length > 0;
        const degraded = !notReady && (source.presenceDegraded().length > 0 || source.keysDegraded().length > 0 || (source.tlsDegraded?.().length ?? 0) > 0);
        this.set({ state: 'ready' }, notReady || degraded ? 0 : 1);
        this.set({ state: 'degraded' }, degraded ? 1 : 0);
        this.set({ state: 'not_ready' }, notReady ? 1 : 0);
      },
    });
    scrapedGauge(this.registry, 'sandgate_presence_degraded', 'Whether the presence store cannot reach Redis and serves from its mirror (1) or is healthy (0)', () => source.presenceDegraded().length > 0 ? 1 : 0);
    scrapedGauge(this.registry, 'sandgate_auth_keys_degraded', 'Whether the API key store cannot reach Redis and serves from its mirror (1) or is healthy (0)', () => source.keysDegraded().length > 0 ? 1 : 0);
  }

  /** The counter of faults in one listener's handlers, for its request guard. */
  handlerErrors(listener: ListenerLabel): { inc(): void } {
    return this.handlerErrorsTotal.labels(listener);
  }

  /** Counts one readiness wait by how it ended. */
  wait(outcome: WaitOutcomeLabel): void {
    this.waits.labels(outcome).inc();
  }

  /** Counts one final decision (`code` undefined for an allow) and, when given, its decision time. */
  decision(door: Door, code: string | undefined, seconds?: number): void {
    const d = DOOR_INDEX[door];
    this.decisions.inc(d * SLOTS_PER_DOOR + (code === undefined ? 0 : 1 + (CODE_INDEX.get(code) ?? 0)));
    if (seconds !== undefined) this.latency.observe(d, seconds);
  }

  /**
   * A counter of one driver's events with one result, for the hot path: `inc()` adds to a plain number,
   * and the sum reaches sandgate_drivers_events_total when it is read. prom-client's own `inc()` hashes
   * the label set on every call, a measurable share of applying an update at 10k updates/s.
   */
  driverEventCounter(driver: string, result: string): { inc(): void } {
    const tally = { child: this.driverEvents.labels(driver, result), count: 0 };
    this.driverEventTallies.push(tally);
    return {
      inc() {
        tally.count++;
      },
    };
  }

  observeLatency(door: Door, seconds: number): void {
    this.latency.observe(DOOR_INDEX[door], seconds);
  }

  /**
   * Traffic-driven lifecycle (docs/lifecycle.md): how long each Ready sandbox has been idle, as a histogram
   * rebuilt at scrape time (one observation per Ready sandbox, no sandbox label), and the idle pauses by
   * result. Returns the function that counts a pause.
   */
  watchLifecycle(idle: () => Iterable<[string, number]>, now: () => number): (result: PauseResult) => void {
    const registers = [this.registry];
    new Histogram({
      name: 'sandgate_lifecycle_idle_seconds',
      help: 'Time since the last traffic (or since becoming Ready) of each Ready sandbox, at scrape time',
      buckets: [10, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 86_400],
      registers,
      collect() {
        this.reset();
        const t = now();
        for (const [, since] of idle()) this.observe(Math.max(0, t - since) / 1000);
      },
    });
    const pauses = new Counter({
      name: 'sandgate_lifecycle_pauses_total',
      help: `Idle pauses by result (${PAUSE_RESULTS.join(', ')})`,
      labelNames: ['result'],
      registers,
    });
    for (const r of PAUSE_RESULTS) pauses.labels(r).inc(0);
    return (result) => pauses.labels(result).inc();
  }
}

// Small live charts from the gateway's own counters (/console/api/stats, the numbers /metrics exposes):
// decisions per second by code, decision latency p50/p99, readiness waits per second by outcome and, with
// --metrics-namespaces, requests per second by tenant namespace (its figure shown only then). The
// server sends cumulative totals; rates and quantiles come from the difference between two samples.

const WINDOW = 120; // samples kept (one per second: two minutes)
const COLORS = ['#1a7f37', '#c62828', '#0b57d0', '#b35900', '#7b3fc4', '#00838f', '#6e7781', '#ad1457', '#827717', '#4e342e'];

/** The q-quantile of the observations between two cumulative bucket samples (Prometheus-style interpolation). */
export function quantile(q, le, before, after) {
  const counts = after.map((c, i) => c - (before[i] ?? 0));
  const total = counts[counts.length - 1] ?? 0;
  if (total <= 0) return null;
  const rank = q * total;
  for (let i = 0; i < counts.length; i++) {
    if (counts[i] >= rank) {
      const upper = le[i] ?? le[i - 1] ?? 0; // +Inf: the highest finite bound
      const lower = i === 0 ? 0 : le[i - 1];
      const below = i === 0 ? 0 : counts[i - 1];
      const inBucket = counts[i] - below;
      return inBucket <= 0 ? upper : lower + (upper - lower) * ((rank - below) / inBucket);
    }
  }
  return null;
}

/** HH:MM:SS of an epoch-seconds tick. */
function clock(t) {
  const d = new Date(t * 1000);
  return [d.getHours(), d.getMinutes(), d.getSeconds()].map((n) => String(n).padStart(2, '0')).join(':');
}

/** A time-series chart whose series (codes, outcomes) appear as they first occur. */
class LiveChart {
  constructor(el, unit, first) {
    this.el = el;
    this.names = [];
    this.data = [[]];
    this.plot = new uPlot(this.options(unit), this.data, el);
    // The usual series shows from the start, so an idle gateway draws a flat line, not an empty box.
    for (const name of first) this.addSeries(name);
    new ResizeObserver(() => this.plot.setSize(this.size())).observe(el);
  }

  size() {
    return { width: Math.max(200, this.el.clientWidth), height: 120 };
  }

  options(unit) {
    return {
      ...this.size(),
      legend: { show: true, live: false },
      cursor: { show: false },
      scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(1, max) * 1.1] } },
      axes: [{ size: 24, space: 70, values: (_u, ticks) => ticks.map(clock) }, { size: 48, label: unit, labelSize: 14 }],
      series: [{}],
    };
  }

  addSeries(name) {
    this.names.push(name);
    this.data.push(this.data[0].map(() => null));
    this.plot.addSeries({ label: name, stroke: COLORS[(this.names.length - 1) % COLORS.length], width: 1.5, spanGaps: true, points: { show: false } }, this.names.length);
  }

  /** Appends one sample: `values` maps series name → value (null = no value this second). */
  push(t, values) {
    for (const name of Object.keys(values)) if (!this.names.includes(name) && values[name] !== 0) this.addSeries(name);
    this.data[0].push(t);
    this.names.forEach((name, i) => this.data[i + 1].push(name in values ? values[name] : 0));
    if (this.data[0].length > WINDOW) for (const s of this.data) s.shift();
    this.plot.setData(this.data);
  }
}

export class Charts {
  constructor(els) {
    this.decisions = new LiveChart(els.decisions, '/s', ['ok']);
    this.latency = new LiveChart(els.latency, 'µs', ['p50', 'p99']);
    this.waits = new LiveChart(els.waits, '/s', ['ready']);
    this.namespacesFigure = els.namespaces.closest('figure');
    this.namespaces = new LiveChart(els.namespaces, '/s', []);
    this.prev = undefined;
  }

  /** Adds one stats sample (the first only sets the baseline). */
  add(s) {
    // A team key gets its namespaces' figures only: the gateway-wide charts are hidden, not drawn flat.
    for (const chart of [this.decisions, this.latency, this.waits]) chart.el.closest('figure').hidden = !s.gatewayWide;
    const p = this.prev;
    this.prev = s;
    if (p === undefined || s.t <= p.t) return;
    const dt = (s.t - p.t) / 1000;
    const t = s.t / 1000;
    const rates = (a, b) => Object.fromEntries(Object.keys(b).map((k) => [k, Math.max(0, (b[k] - (a[k] ?? 0)) / dt)]));
    this.decisions.push(t, rates(p.decisions, s.decisions));
    const us = (v) => (v === null ? null : v * 1e6);
    this.latency.push(t, {
      p50: us(quantile(0.5, s.latency.le, p.latency.counts, s.latency.counts)),
      p99: us(quantile(0.99, s.latency.le, p.latency.counts, s.latency.counts)),
    });
    this.waits.push(t, rates(p.waits, s.waits));
    if (Object.keys(s.namespaces).length > 0) {
      this.namespacesFigure.hidden = false;
      this.namespaces.push(t, rates(p.namespaces, s.namespaces));
    }
  }
}

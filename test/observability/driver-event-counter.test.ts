import { describe, expect, it } from 'vitest';
import { GatewayMetrics } from '../../src/observability/metrics.js';

const view = { size: 0, phaseCounts: () => new Map<string, number>(), refusedIdCounts: () => ({}) };

function sample(text: string, driver: string, result: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`sandgate_drivers_events_total{driver="${driver}",result="${result}"}`));
  return line === undefined ? undefined : Number(line.split(' ').at(-1));
}

describe('driver event counters', () => {
  it('reach sandgate_drivers_events_total when it is read, once each', async () => {
    const m = new GatewayMetrics(view, false);
    const applied = m.driverEventCounter('grpc/a', 'applied');
    const stale = m.driverEventCounter('grpc/a', 'stale');
    applied.inc();
    applied.inc();
    applied.inc();
    stale.inc();
    let text = await m.registry.metrics();
    expect(sample(text, 'grpc/a', 'applied')).toBe(3);
    expect(sample(text, 'grpc/a', 'stale')).toBe(1);
    // A second read adds nothing that was already counted.
    text = await m.registry.metrics();
    expect(sample(text, 'grpc/a', 'applied')).toBe(3);
    applied.inc();
    m.driverEvents.labels('grpc/a', 'resync').inc();
    text = await m.registry.metrics();
    expect(sample(text, 'grpc/a', 'applied')).toBe(4);
    expect(sample(text, 'grpc/a', 'resync')).toBe(1);
  });
});

import { describe, expect, it } from 'vitest';
import { createLogger, MemoryLogSink } from '../../src/observability/logger.js';
import { MemoryPresence } from '../../src/sessions/presence/memory-presence.js';
import type { PresenceRecord } from '../../src/sessions/presence/presence-store.js';

const session = (sessionId: string, since = 1000) => ({ sessionId, instanceId: `inst-${sessionId}`, since });

describe('MemoryPresence', () => {
  it('claim records the session with a per-sandbox epoch and reports the change', async () => {
    const p = new MemoryPresence('gw-1');
    const seen: [string, string, PresenceRecord | undefined][] = [];
    p.onChange((ns, name, r) => seen.push([ns, name, r]));
    await p.start();
    const r = await p.claim('ns', 'a', session('s1'));
    expect(r).toEqual({ namespace: 'ns', name: 'a', gatewayId: 'gw-1', sessionId: 's1', instanceId: 'inst-s1', epoch: 1, since: 1000 });
    expect(p.get('ns', 'a')).toEqual(r);
    expect((await p.claim('ns', 'b', session('s2'))).epoch).toBe(1);
    expect([...p.list()].map((x) => x.sessionId).sort()).toEqual(['s1', 's2']);
    expect(seen.map(([ns, name, rec]) => `${ns}/${name}:${rec?.sessionId}`)).toEqual(['ns/a:s1', 'ns/b:s2']);
  });

  it('epochs grow with every claim and survive release', async () => {
    const p = new MemoryPresence('gw-1');
    expect((await p.claim('ns', 'a', session('s1'))).epoch).toBe(1);
    expect((await p.claim('ns', 'a', session('s2'))).epoch).toBe(2);
    expect(await p.release('ns', 'a', 's2')).toBe(true);
    expect((await p.claim('ns', 'a', session('s3'))).epoch).toBe(3);
  });

  it('release is remove-if-current: a superseded session cannot remove its successor', async () => {
    const p = new MemoryPresence('gw-1');
    await p.claim('ns', 'a', session('old'));
    const current = await p.claim('ns', 'a', session('new'));
    const seen: (PresenceRecord | undefined)[] = [];
    p.onChange((_ns, _name, r) => seen.push(r));
    expect(await p.release('ns', 'a', 'old')).toBe(false);
    expect(p.get('ns', 'a')).toEqual(current);
    expect(seen).toEqual([]);
    expect(await p.release('ns', 'a', 'new')).toBe(true);
    expect(p.get('ns', 'a')).toBeUndefined();
    expect(seen).toEqual([undefined]);
    expect(await p.release('ns', 'a', 'new')).toBe(false);
  });

  it('never loses sessions to another gateway and is never degraded', async () => {
    const p = new MemoryPresence('gw-1');
    let lost = 0;
    p.onLost(() => lost++);
    await p.claim('ns', 'a', session('s1'));
    await p.claim('ns', 'a', session('s2'));
    expect(lost).toBe(0);
    expect(p.degraded()).toEqual([]);
    await p.close({ release: true });
  });

  it('unsubscribing stops change reports', async () => {
    const p = new MemoryPresence('gw-1');
    let calls = 0;
    const off = p.onChange(() => calls++);
    await p.claim('ns', 'a', session('s1'));
    off();
    await p.claim('ns', 'a', session('s2'));
    expect(calls).toBe(1);
  });

  it('keeps only the claim fields a caller passed', async () => {
    const p = new MemoryPresence('gw-1');
    const r = await p.claim('ns', 'a', { ...session('s1'), token: 'secret' } as ReturnType<typeof session>);
    expect(Object.keys(r).sort()).toEqual(['epoch', 'gatewayId', 'instanceId', 'name', 'namespace', 'sessionId', 'since']);
  });

  it('a throwing listener does not stop the others; without a logger the error reaches the caller', async () => {
    const p = new MemoryPresence('gw-1');
    let second = 0;
    p.onChange(() => {
      throw new Error('listener bug');
    });
    p.onChange(() => second++);
    await expect(p.claim('ns', 'a', session('s1'))).rejects.toThrow('listener bug');
    expect(second).toBe(1);
    expect(p.get('ns', 'a')?.sessionId).toBe('s1');
  });

  it('with a logger, a throwing listener is logged instead', async () => {
    const sink = new MemoryLogSink();
    const p = new MemoryPresence('gw-1', { log: createLogger('info', sink) });
    p.onChange(() => {
      throw new Error('listener bug');
    });
    await p.claim('ns', 'a', session('s1'));
    expect(sink.find((l) => l.msg === 'presence listener failed')).toBeDefined();
  });
});

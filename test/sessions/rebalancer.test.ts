import { describe, expect, it } from 'vitest';
import { pino } from 'pino';
import { MemoryPresence } from '../../src/sessions/presence/memory-presence.js';
import type { LiveLease, PresenceRecord } from '../../src/sessions/presence/presence-store.js';
import { planMoves, Rebalancer, type GatewayLoad } from '../../src/sessions/rebalancer.js';
import type { LocalSession } from '../../src/sessions/supervisor-server.js';
import type { Feature } from '../../src/sessions/supervisor-protocol.js';

// Which moves a gateway asks for, as a pure function of the loads it sees, then the rounds around it.

const loads = (...xs: [string, number][]): GatewayLoad[] => xs.map(([gatewayId, sessions]) => ({ gatewayId, sessions, url: `ws://${gatewayId}` }));
const moved = (plan: ReturnType<typeof planMoves>) => plan.map((p) => `${p.to.gatewayId}:${p.count}`);

describe('planMoves', () => {
  const table: { name: string; self: string; loads: GatewayLoad[]; max: number; want: string[] }[] = [
    { name: 'a third gateway joins two that hold 200', self: 'A', loads: loads(['A', 100], ['B', 100], ['C', 0]), max: 1000, want: ['C:33'] },
    { name: 'the same, bounded per round', self: 'A', loads: loads(['A', 100], ['B', 100], ['C', 0]), max: 10, want: ['C:10'] },
    { name: 'balanced: nobody moves', self: 'A', loads: loads(['A', 67], ['B', 67], ['C', 66]), max: 1000, want: [] },
    { name: 'within the margin (a tenth of the share): nobody moves', self: 'A', loads: loads(['A', 73], ['B', 64], ['C', 63]), max: 1000, want: [] },
    { name: 'past the margin: only the excess over the share moves', self: 'A', loads: loads(['A', 80], ['B', 60], ['C', 60]), max: 1000, want: ['B:6', 'C:6'] },
    { name: 'a light gateway never moves anyone', self: 'C', loads: loads(['A', 100], ['B', 100], ['C', 0]), max: 1000, want: [] },
    { name: 'alone: nothing to move to', self: 'A', loads: loads(['A', 100]), max: 1000, want: [] },
    { name: 'no session anywhere', self: 'A', loads: loads(['A', 0], ['B', 0]), max: 1000, want: [] },
    { name: 'two light gateways share in proportion to their deficit', self: 'A', loads: loads(['A', 90], ['B', 0], ['C', 20]), max: 1000, want: ['B:36', 'C:16'] },
    { name: 'one session more than the others is no reason to move', self: 'A', loads: loads(['A', 2], ['B', 1], ['C', 1]), max: 1000, want: [] },
    { name: 'small numbers still converge', self: 'A', loads: loads(['A', 6], ['B', 6], ['C', 0]), max: 1000, want: ['C:2'] },
    { name: 'self missing from the loads: nothing', self: 'Z', loads: loads(['A', 6], ['B', 0]), max: 1000, want: [] },
    { name: 'a light gateway that published no URL is no target (a move naming none could land on a heavy one)', self: 'A', loads: [...loads(['A', 100], ['B', 100]), { gatewayId: 'C', sessions: 0 }], max: 1000, want: [] },
  ];
  for (const t of table) {
    it(t.name, () => {
      expect(moved(planMoves(t.self, t.loads, t.max)).sort()).toEqual([...t.want].sort());
    });
  }

  it('heavy gateways planning at once move no more than the light ones lack', () => {
    const l = loads(['A', 100], ['B', 100], ['C', 0]);
    const total = [...planMoves('A', l, 1000), ...planMoves('B', l, 1000)].reduce((sum, p) => sum + p.count, 0);
    expect(total).toBeLessThanOrEqual(66);
    expect(total).toBeGreaterThanOrEqual(60);
  });
});

/** A store that reports peers' leases and records as a Redis mirror would, over a memory store. */
class PeerStore extends MemoryPresence {
  readonly peers: LiveLease[] = [];
  readonly remote: PresenceRecord[] = [];

  override list(): Iterable<PresenceRecord> {
    return this.remote;
  }

  gatewayLeases(): LiveLease[] {
    return this.peers;
  }

  gatewayInfo(id: string): Readonly<Record<string, string>> | undefined {
    return this.peers.find((p) => p.gatewayId === id)?.info;
  }
}

function session(i: number, features: Feature[] = ['relay', 'move']): LocalSession {
  return { sessionId: `s${i}`, namespace: 'ns', name: `sb${i}`, state: 'active', features: new Set(features), movedAt: 0 } as unknown as LocalSession;
}

describe('Rebalancer rounds', () => {
  function setup(mine: LocalSession[]) {
    const store = new PeerStore('A');
    store.peers.push({ gatewayId: 'B', info: { supervisor: 'ws://b' }, expiresInMs: 1000 });
    const asked: { id: string; to: string | undefined }[] = [];
    const clock = { t: 0 };
    const here = new Set(mine);
    const r = new Rebalancer({ gatewayId: 'A', intervalMs: 100, maxMoves: 3, log: pino({ level: 'silent' }), now: () => clock.t }, store, {
      sessions: () => here,
      move: (s, to) => {
        if (!s.features.has('move')) return false;
        asked.push({ id: s.sessionId, to });
        return true;
      },
    });
    return { r, asked, clock, here };
  }

  it('asks at most maxMoves per round, names the target, skips supervisors without `move`, and waits for the moves to land', () => {
    const mine = [session(0, ['relay']), ...Array.from({ length: 9 }, (_, i) => session(i + 1))];
    const { r, asked, clock, here } = setup(mine);
    expect(r.round()).toBe(3);
    expect(asked.map((a) => a.id)).toEqual(['s1', 's2', 's3']);
    expect(new Set(asked.map((a) => a.to))).toEqual(new Set(['ws://b']));
    // The asked sessions are still here: no new round.
    clock.t += 100;
    expect(r.round()).toBe(0);
    // They moved (gone from here): the next round asks again, from what is left.
    for (const s of mine.slice(1, 4)) here.delete(s);
    expect(r.round()).toBe(3);
    expect(asked.map((a) => a.id)).toEqual(['s1', 's2', 's3', 's4', 's5', 's6']);
  });

  it('a move that never lands is given up after the timeout and may be asked again', () => {
    const mine = Array.from({ length: 4 }, (_, i) => session(i));
    const { r, asked, clock } = setup(mine);
    expect(r.round()).toBe(2);
    clock.t += 299;
    expect(r.round()).toBe(0);
    clock.t += 1;
    expect(r.round()).toBe(2);
    expect(asked.map((a) => a.id)).toEqual(['s0', 's1', 's0', 's1']);
  });
});

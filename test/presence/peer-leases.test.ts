import { describe, expect, it } from 'vitest';
import { PeerLeases } from '../../src/sessions/presence/peer-leases.js';
import { PresenceMirror } from '../../src/sessions/presence/presence-mirror.js';
import type { GatewayLease } from '../../src/sessions/presence/redis-codec.js';

// The lease map the relay lookup reads, against its rule recomputed from the shards' mirrors after every
// change: a gateway is in it while some shard's mirror holds its lease, as that of the lowest such shard.

const GATEWAYS = ['B', 'C', 'D'];

function setup(shards: number) {
  const mirrors: PresenceMirror[] = [];
  const peers = new PeerLeases(mirrors);
  for (let k = 0; k < shards; k++) mirrors.push(new PresenceMirror('A', 'a-1', { change: () => undefined, lost: () => undefined, lease: (id) => peers.refresh(id) }));
  return { mirrors, peers };
}

/** The rule, computed from scratch. */
function expected(mirrors: readonly PresenceMirror[]): Map<string, GatewayLease> {
  const out = new Map<string, GatewayLease>();
  for (const id of GATEWAYS) {
    const l = mirrors.map((m) => m.lease(id)).find((x) => x !== undefined);
    if (l !== undefined) out.set(id, l);
  }
  return out;
}

/** A small deterministic generator (mulberry32), so a failure replays. */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe('PeerLeases', () => {
  it('a peer missing from one shard stays reachable through the others; it leaves with its last shard', () => {
    const { mirrors, peers } = setup(3);
    const b = (deadline: number): GatewayLease => ({ gatewayId: 'B', incarnation: 'b-1', info: { relay: 'b:1' }, term: 0, deadline });
    for (const m of mirrors) m.putLease(b(1000));
    mirrors[1]!.dropLease('B');
    expect(peers.get('B')?.info).toEqual({ relay: 'b:1' });
    mirrors[0]!.expireLeases(1000);
    // Shard 0 lost it too: the entry is shard 2's lease now, deadline included.
    mirrors[2]!.putLease(b(2000));
    expect(peers.get('B')?.deadline).toBe(2000);
    mirrors[2]!.replaceLeases([]);
    expect(peers.get('B')).toBeUndefined();
    expect([...peers.values()]).toEqual([]);
  });

  it('after a restart under the same id, the incarnation in shard 0 (renewed first) is the one answered', () => {
    const { mirrors, peers } = setup(2);
    mirrors[1]!.putLease({ gatewayId: 'B', incarnation: 'b-1', info: { relay: 'old:1' }, term: 0, deadline: 1000 });
    mirrors[0]!.putLease({ gatewayId: 'B', incarnation: 'b-2', info: { relay: 'new:1' }, term: -1, deadline: 1000 });
    expect(peers.get('B')?.info).toEqual({ relay: 'new:1' });
  });

  for (const seed of [1, 2, 3, 4, 5]) {
    it(`equals the rule recomputed from the mirrors after every change (seed ${seed})`, () => {
      const rnd = random(seed);
      const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
      const { mirrors, peers } = setup(4);
      const lease = (): GatewayLease => ({ gatewayId: pick(GATEWAYS), incarnation: pick(['i1', 'i2']), info: { relay: `r${Math.floor(rnd() * 5)}` }, term: Math.floor(rnd() * 3) - 1, deadline: Math.floor(rnd() * 100) });
      let term = 0;
      for (let step = 0; step < 2000; step++) {
        const m = pick(mirrors);
        const op = pick(['put', 'put', 'drop', 'replace', 'expire', 'term']);
        if (op === 'put') m.putLease(lease());
        else if (op === 'drop') m.dropLease(pick(GATEWAYS));
        else if (op === 'replace') m.replaceLeases(Array.from({ length: Math.floor(rnd() * 3) }, lease));
        else if (op === 'expire') m.expireLeases(Math.floor(rnd() * 100));
        else m.setTerm(++term, Math.floor(rnd() * 100));
        expect(new Map(Array.from(peers.values(), (l) => [l.gatewayId, l] as const)), `step ${step} (${op})`).toEqual(expected(mirrors));
        for (const id of GATEWAYS) expect(peers.get(id)).toBe(expected(mirrors).get(id));
      }
    });
  }
});

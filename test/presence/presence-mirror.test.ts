import { describe, expect, it } from 'vitest';
import { PresenceMirror } from '../../src/sessions/presence/presence-mirror.js';
import type { PresenceRecord } from '../../src/sessions/presence/presence-store.js';
import { decodeLeases, decodeMessage, decodeRecord, type GatewayLease, type StoredRecord } from '../../src/sessions/presence/redis-codec.js';

// The mirror's rules without Redis: what counts as visible, when a local session is lost, what is stale.

const ME = 'A';
const MY_INC = 'a-1';

function setup() {
  const changes: string[] = [];
  const lost: PresenceRecord[] = [];
  const m = new PresenceMirror(ME, MY_INC, {
    change: (ns, name, r) => changes.push(`${ns}/${name}=${r === undefined ? '-' : `${r.gatewayId}:${r.sessionId}@${r.epoch}`}`),
    lost: (r) => lost.push(r),
  });
  return { m, changes, lost };
}

const rec = (gatewayId: string, sessionId: string, epoch: number, name = 'sb'): PresenceRecord => ({ namespace: 'ns', name, gatewayId, sessionId, instanceId: 'i', epoch, since: 1 });
const stored = (gatewayId: string, incarnation: string, sessionId: string, epoch: number, name = 'sb'): StoredRecord => ({ record: rec(gatewayId, sessionId, epoch, name), incarnation });
const lease = (gatewayId: string, incarnation: string, deadline = 1000, term = 0): GatewayLease => ({ gatewayId, incarnation, info: { relay: `${gatewayId}:1` }, term, deadline });

describe('visibility', () => {
  const table: { name: string; leases: GatewayLease[]; remote: StoredRecord; visible: boolean }[] = [
    { name: 'a live peer record counts', leases: [lease('B', 'b-1')], remote: stored('B', 'b-1', 's', 1), visible: true },
    { name: 'a peer without a lease does not', leases: [], remote: stored('B', 'b-1', 's', 1), visible: false },
    { name: "a peer's previous incarnation does not", leases: [lease('B', 'b-2')], remote: stored('B', 'b-1', 's', 1), visible: false },
    { name: "this gateway's own record is never taken from Redis", leases: [lease(ME, MY_INC)], remote: stored(ME, MY_INC, 's', 1), visible: false },
  ];
  for (const t of table) {
    it(t.name, () => {
      const { m } = setup();
      m.replaceLeases(t.leases);
      m.putRemote('ns/sb', t.remote);
      expect(m.get('ns/sb')).toEqual(t.visible ? t.remote.record : undefined);
    });
  }

  it('records appear and vanish with their lease, with a change each time', () => {
    const { m, changes } = setup();
    m.putRemote('ns/sb', stored('B', 'b-1', 's', 1));
    m.putLease(lease('B', 'b-1', 500));
    expect(m.expireLeases(499)).toBe(500);
    expect(m.expireLeases(500)).toBeUndefined();
    expect(changes).toEqual(['ns/sb=B:s@1', 'ns/sb=-']);
    expect(m.lease('B')).toBeUndefined();
  });

  it('a local session wins over a remote one and hides nothing when released', () => {
    const { m, changes } = setup();
    m.replaceLeases([lease('B', 'b-1')]);
    m.putRemote('ns/sb', stored('B', 'b-1', 'old', 1));
    m.setLocal(rec(ME, 'mine', 2));
    expect(m.get('ns/sb')?.sessionId).toBe('mine');
    // Redis now holds this gateway's record (its own message); releasing leaves nothing visible.
    m.putRemote('ns/sb', stored(ME, MY_INC, 'mine', 2));
    expect(m.deleteLocal('ns/sb', 'other')).toBeUndefined();
    expect(m.deleteLocal('ns/sb', 'mine')?.sessionId).toBe('mine');
    expect(m.get('ns/sb')).toBeUndefined();
    expect(changes).toEqual(['ns/sb=B:old@1', 'ns/sb=A:mine@2', 'ns/sb=-']);
  });

  it('replaceRemote diffs: unchanged records report nothing', () => {
    const { m, changes } = setup();
    m.replaceLeases([lease('B', 'b-1')]);
    m.replaceRemote(new Map([['ns/x', stored('B', 'b-1', 's', 1, 'x')]]));
    m.replaceRemote(new Map([['ns/x', stored('B', 'b-1', 's', 1, 'x')], ['ns/y', stored('B', 'b-1', 't', 1, 'y')]]));
    m.replaceRemote(new Map([['ns/y', stored('B', 'b-1', 't', 1, 'y')]]));
    expect(changes).toEqual(['ns/x=B:s@1', 'ns/y=B:t@1', 'ns/x=-']);
  });
});

describe('lost local sessions', () => {
  const table: { name: string; local: number; remote: StoredRecord; lost: boolean }[] = [
    { name: 'a newer epoch from another gateway supersedes', local: 3, remote: stored('B', 'b-1', 'theirs', 4), lost: true },
    { name: 'an equal epoch under another session supersedes (the first writer won)', local: 3, remote: stored('B', 'b-1', 'theirs', 3), lost: true },
    { name: 'an older epoch does not', local: 3, remote: stored('B', 'b-1', 'theirs', 2), lost: false },
    { name: "this incarnation's own record does not", local: 3, remote: stored(ME, MY_INC, 'other', 9), lost: false },
    { name: 'another process with the same gateway id does', local: 3, remote: stored(ME, 'a-2', 'other', 4), lost: true },
    { name: 'a newer record of a dead gateway still does (the supervisor moved)', local: 3, remote: stored('C', 'c-1', 'theirs', 4), lost: true },
  ];
  for (const t of table) {
    it(t.name, () => {
      const { m, lost } = setup();
      m.replaceLeases([lease('B', 'b-1')]);
      const mine = rec(ME, 'mine', t.local);
      m.setLocal(mine);
      m.putRemote('ns/sb', t.remote);
      expect(lost).toEqual(t.lost ? [mine] : []);
      expect(m.localRecord('ns/sb')).toEqual(t.lost ? undefined : mine);
    });
  }

  it('setLocal reports a conflict already mirrored, without firing lost itself', () => {
    const { m, lost } = setup();
    m.putRemote('ns/sb', stored('B', 'b-1', 'theirs', 5));
    expect(m.setLocal(rec(ME, 'mine', 4))).toBe(true);
    expect(lost).toEqual([]);
    m.checkLost('ns/sb');
    expect(lost.map((r) => r.sessionId)).toEqual(['mine']);
  });
});

describe('epochs and stale records', () => {
  it('nextEpoch is above every epoch seen, even after the record is gone', () => {
    const { m } = setup();
    expect(m.nextEpoch('ns/sb')).toBe(1);
    m.putRemote('ns/sb', stored('B', 'b-1', 's', 7));
    m.putRemote('ns/sb', undefined);
    expect(m.nextEpoch('ns/sb')).toBe(8);
  });

  it('staleRecords names unbacked peer records and own orphans, not live ones', () => {
    const { m } = setup();
    m.replaceLeases([lease('B', 'b-1'), lease(ME, MY_INC)]);
    m.setLocal(rec(ME, 'mine', 1, 'own'));
    m.replaceRemote(
      new Map([
        ['ns/live', stored('B', 'b-1', 'l', 1, 'live')],
        ['ns/dead', stored('C', 'c-1', 'd', 2, 'dead')],
        ['ns/old', stored('B', 'b-0', 'o', 3, 'old')],
        ['ns/own', stored(ME, MY_INC, 'mine', 1, 'own')],
        ['ns/orphan', stored(ME, MY_INC, 'gone', 4, 'orphan')],
        ['ns/prev', stored(ME, 'a-0', 'p', 5, 'prev')],
      ]),
    );
    expect(m.staleRecords().map((s) => `${s.field}:${s.sessionId}@${s.epoch}`).sort()).toEqual(['ns/dead:d@2', 'ns/old:o@3', 'ns/orphan:gone@4', 'ns/prev:p@5']);
  });
});

describe('codec', () => {
  it('rejects malformed records and messages', () => {
    for (const raw of ['nope', '{}', '{"g":"B","i":"x","s":"s","n":"n","e":0,"t":"1"}', '{"g":1,"i":"x","s":"s","n":"n","e":1,"t":"1"}', '[]']) {
      expect(decodeRecord('ns/sb', raw)).toBeUndefined();
    }
    expect(decodeRecord('nofield', '{"g":"B","i":"x","s":"s","n":"n","e":1,"t":"1"}')).toBeUndefined();
    for (const text of ['', 'x', '{"op":"set"}', '{"v":1,"op":"bogus"}', '{"v":1,"op":"set","f":"ns/sb","r":{}}', '{"v":1,"op":"gw","g":"B","info":"{}"}']) {
      expect(decodeMessage(text)).toBeUndefined();
    }
  });

  it('decodes what the scripts publish, including an empty list encoded as {} by cjson', () => {
    expect(decodeMessage('{"v":3,"op":"gw-down","g":"B","i":"b-1","fs":{}}')).toEqual({ v: 3, op: 'gw-down', gatewayId: 'B', incarnation: 'b-1', fields: [] });
    expect(decodeMessage('{"v":4,"op":"set","f":"ns/sb","r":{"g":"B","i":"b-1","s":"s","n":"n","e":2,"t":"1700000000123"}}')).toEqual({
      v: 4,
      op: 'set',
      field: 'ns/sb',
      stored: { incarnation: 'b-1', record: { namespace: 'ns', name: 'sb', gatewayId: 'B', sessionId: 's', instanceId: 'n', epoch: 2, since: 1_700_000_000_123 } },
    });
  });

  it('translates lease expiry to the local clock by remaining lifetime (clock skew cancels)', () => {
    const leases = decodeLeases(['B', '5000450', '{"i":"b-1","a":{"relay":"x"},"t":3}', 'C', '1', 'garbage', 'D', '5000001', '{"i":"d-1","a":{}}'], 5_000_000, 42);
    expect(leases).toEqual([
      { gatewayId: 'B', incarnation: 'b-1', info: { relay: 'x' }, term: 3, deadline: 492 },
      { gatewayId: 'D', incarnation: 'd-1', info: {}, term: -1, deadline: 43 },
    ]);
  });
});

describe('after a failover (a new term)', () => {
  function failedOver(): { m: PresenceMirror; changes: string[]; synced: string[] } {
    const changes: string[] = [];
    const synced: string[] = [];
    const m = new PresenceMirror(ME, MY_INC, {
      change: (ns, name, r) => changes.push(`${ns}/${name}=${r === undefined ? '-' : `${r.gatewayId}:${r.sessionId}@${r.epoch}`}`),
      lost: () => undefined,
      synced: (gw) => synced.push(gw),
    });
    m.setTerm(0);
    m.replaceLeases([lease('B', 'b-1', 1000, 0)]);
    m.replaceRemote(new Map([['ns/kept', stored('B', 'b-1', 'k', 4, 'kept')]]));
    m.setTerm(1);
    return { m, changes, synced };
  }

  it("a scan does not replace a peer's records until the peer has re-asserted them in the new term", () => {
    const { m, changes, synced } = failedOver();
    // The new master lost B's claim of ns/kept and still holds a record B released before the failover
    // (ns/released).
    m.replaceRemote(new Map([['ns/released', stored('B', 'b-1', 'r', 2, 'released')]]));
    expect(m.get('ns/kept')?.sessionId).toBe('k');
    expect(m.get('ns/released')).toBeUndefined();
    // B announces it re-asserted in term 1: the mirror asks for a scan, which now reads B's records.
    m.putLease(lease('B', 'b-1', 1000, 1));
    expect(synced).toEqual(['B']);
    m.replaceRemote(new Map([['ns/kept', stored('B', 'b-1', 'k', 4, 'kept')]]));
    expect(m.get('ns/kept')?.sessionId).toBe('k');
    expect(m.get('ns/released')).toBeUndefined();
    expect(changes).toEqual(['ns/kept=B:k@4']);
  });

  it("a peer missing from the new master's leases counts until one grace period after the term changed", () => {
    const changes: string[] = [];
    const m = new PresenceMirror(ME, MY_INC, { change: (ns, name, r) => changes.push(`${ns}/${name}=${r?.sessionId ?? '-'}`), lost: () => undefined });
    m.setTerm(0);
    m.replaceLeases([lease('B', 'b-1', 1000, 0)]);
    m.replaceRemote(new Map([['ns/sb', stored('B', 'b-1', 's', 1)]]));
    m.setTerm(1, 5000);
    // The new master lost B's renewals: its live leases do not list B yet.
    m.replaceLeases([]);
    expect(m.get('ns/sb')?.sessionId).toBe('s');
    expect(m.expireLeases(4999)).toBe(5000);
    expect(m.get('ns/sb')?.sessionId).toBe('s');
    // B never came back: it goes when the grace ends.
    m.expireLeases(5000);
    expect(m.get('ns/sb')).toBeUndefined();
    expect(changes).toEqual(['ns/sb=s', 'ns/sb=-']);
  });

  it("a scan replaces the records of a gateway whose lease is gone (a dead gateway's sandboxes, claimed elsewhere since)", () => {
    const { m } = failedOver();
    m.putLease(lease('B', 'b-1', 1000, 1));
    m.putLease(lease('C', 'c-1', 1000, 1));
    // B is killed: its lease expires here. Its supervisor reconnects to C, whose claim this mirror learns
    // only from a scan (the message was covered by the scan's counter).
    m.expireLeases(1000);
    m.putLease(lease('C', 'c-1', 5000, 1));
    m.replaceRemote(new Map([['ns/kept', stored('C', 'c-1', 'moved', 5, 'kept')]]));
    expect(m.get('ns/kept')?.sessionId).toBe('moved');
  });

  it('messages (writes made on the new master) still apply at once', () => {
    const { m } = failedOver();
    m.putRemote('ns/kept', undefined);
    expect(m.get('ns/kept')).toBeUndefined();
  });
});

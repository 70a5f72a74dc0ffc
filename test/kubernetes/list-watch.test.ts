import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { KubeClient, kubeConfigForServer } from '../../src/drivers/kubernetes/kube-client.js';
import { ListWatch, type ListWatchHandlers, type ListWatchOptions } from '../../src/drivers/kubernetes/list-watch.js';
import { LineSplitter, parseWatchEvent } from '../../src/drivers/kubernetes/watch-stream.js';
import { AGENT_SANDBOX, FakeKubeApi, OPENKRUISE_SANDBOX, Recorder } from '../helpers/fake-kube-api.js';

/** The list/watch protocol against a fake API server: pages, resume, bookmarks, 410s, drops, bad lines. */

const PATH = '/apis/agents.x-k8s.io/v1alpha1/sandboxes';
const FAST: ListWatchOptions = {
  pageSize: 500,
  watchTimeoutSeconds: 300,
  idleTimeoutMs: 60_000,
  backoff: { initialMs: 1, maxMs: 5 },
  random: () => 1,
};

type Entry = string;

function recorder(): { rec: Recorder<Entry>; handlers: ListWatchHandlers } {
  const rec = new Recorder<Entry>();
  const name = (o: Readonly<Record<string, unknown>>): string => {
    const m = o.metadata as Record<string, unknown>;
    return `${String(m.namespace)}/${String(m.name)}`;
  };
  return {
    rec,
    handlers: {
      beginList: () => rec.push('begin'),
      listItem: (o) => rec.push(`item ${name(o)}`),
      endList: (rv, served) => rec.push(`end ${served ? rv : 'not-served'}`),
      event: (e) => rec.push(`${e.type} ${name(e.object)} ${e.resourceVersion}`),
      bookmark: (rv) => rec.push(`bookmark ${rv}`),
      error: (err) => rec.push(`error ${(err as { reason?: string }).reason ?? err.message}`),
    },
  };
}

function sandbox(name: string, namespace = 'team-a'): Record<string, unknown> {
  return { metadata: { name, namespace }, spec: { replicas: 1 }, status: { conditions: [{ type: 'Ready', status: 'True', reason: 'DependenciesReady', message: 'ok' }] } };
}

let api: FakeKubeApi;
let lw: ListWatch | undefined;

beforeEach(async () => {
  api = await FakeKubeApi.start();
});

afterEach(async () => {
  await lw?.stop();
  lw = undefined;
  await api.close();
});

function start(opts: Partial<ListWatchOptions> = {}, path = PATH): Recorder<Entry> {
  const { rec, handlers } = recorder();
  lw = new ListWatch(new KubeClient(kubeConfigForServer(api.url)), path, handlers, { ...FAST, ...opts });
  lw.start();
  return rec;
}

const has = (s: string) => (items: readonly string[]) => items.includes(s);
const count = (s: string, n: number) => (items: readonly string[]) => items.filter((x) => x === s).length >= n;

describe('ListWatch', () => {
  it('lists in pages over one consistent snapshot, then watches from the list resourceVersion', async () => {
    for (let i = 0; i < 7; i++) api.create(AGENT_SANDBOX, sandbox(`s${i}`));
    const listRv = api.resourceVersion;
    const rec = start({ pageSize: 3 });
    await rec.until(has(`end ${listRv}`), 'the list');
    await api.waitForWatches(1);
    expect(rec.items.filter((x) => x.startsWith('item'))).toHaveLength(7);
    const lists = api.lists();
    expect(lists.map((r) => [r.query.limit, r.query.continue !== undefined])).toEqual([
      ['3', false],
      ['3', true],
      ['3', true],
    ]);
    const watch = api.watches()[0]!;
    expect(watch.query).toMatchObject({ watch: '1', resourceVersion: listRv, allowWatchBookmarks: 'true', timeoutSeconds: '300' });
  });

  it('delivers ADDED, MODIFIED and DELETED in order and tracks their resourceVersion', async () => {
    const rec = start();
    await api.waitForWatches(1);
    api.create(AGENT_SANDBOX, sandbox('a'));
    api.modify(AGENT_SANDBOX, 'team-a', 'a', (o) => ((o.status as Record<string, unknown>).podIPs = ['10.0.0.1']));
    api.remove(AGENT_SANDBOX, 'team-a', 'a');
    const rv = api.resourceVersion;
    await rec.until(has(`DELETED team-a/a ${rv}`), 'the delete');
    expect(rec.items.filter((x) => /^(ADDED|MODIFIED|DELETED)/.test(x))).toEqual([`ADDED team-a/a ${+rv - 2}`, `MODIFIED team-a/a ${+rv - 1}`, `DELETED team-a/a ${rv}`]);
    expect(lw!.resourceVersion).toBe(rv);
  });

  it('reassembles events split across chunks, including inside a UTF-8 character', async () => {
    api.splitWrites = true;
    const rec = start();
    await api.waitForWatches(1);
    const o = sandbox('ü');
    (o.metadata as Record<string, unknown>).name = 'üüüü-名前';
    api.create(AGENT_SANDBOX, o);
    await rec.until((items) => items.some((x) => x.startsWith('ADDED team-a/üüüü-名前')), 'the split event');
    expect(rec.items.filter((x) => x.startsWith('error'))).toEqual([]);
  });

  it('advances the resourceVersion on BOOKMARK and resumes from it after a drop, without a relist', async () => {
    const rec = start();
    await api.waitForWatches(1);
    // Changes to another resource move the shared counter; this watch sees only the bookmark.
    api.create(OPENKRUISE_SANDBOX, sandbox('other'));
    api.create(OPENKRUISE_SANDBOX, sandbox('other2'));
    const rv = api.resourceVersion;
    api.bookmark();
    await rec.until(has(`bookmark ${rv}`), 'the bookmark');
    // History before the bookmark is gone: resuming from an older version would get 410.
    api.compact();
    api.dropWatches();
    await api.waitForWatches(2);
    expect(api.watches()[1]!.query.resourceVersion).toBe(rv);
    api.create(AGENT_SANDBOX, sandbox('after'));
    await rec.until((items) => items.some((x) => x.startsWith('ADDED team-a/after')), 'an event after the reconnect');
    expect(rec.items.filter((x) => x === 'begin')).toHaveLength(1);
    expect(rec.items.filter((x) => x.startsWith('error'))).toEqual(['error WatchDropped']);
  });

  it('resumes from the last event after a dropped connection, without a relist', async () => {
    const rec = start();
    await api.waitForWatches(1);
    api.create(AGENT_SANDBOX, sandbox('a'));
    const rv = api.resourceVersion;
    await rec.until(has(`ADDED team-a/a ${rv}`), 'the event');
    api.dropWatches();
    await api.waitForWatches(2);
    expect(api.watches()[1]!.query.resourceVersion).toBe(rv);
    api.create(AGENT_SANDBOX, sandbox('b'));
    await rec.until((items) => items.some((x) => x.startsWith('ADDED team-a/b')), 'the next event');
    expect(api.lists()).toHaveLength(1);
    expect(rec.items.filter((x) => x.startsWith('ADDED'))).toHaveLength(2);
  });

  it('relists on an ERROR event carrying a 410 Status', async () => {
    const rec = start();
    await rec.until(has('end ' + api.resourceVersion), 'the first list');
    await api.waitForWatches(1);
    api.holdEvents = true;
    api.create(AGENT_SANDBOX, sandbox('missed'));
    api.expireWatches();
    api.holdEvents = false;
    await rec.until(count('begin', 2), 'the relist');
    await rec.until((items) => items.filter((x) => x.startsWith('end')).length === 2, 'the relist to end');
    expect(rec.items).toContain('item team-a/missed');
    expect(rec.items.filter((x) => x.startsWith('error'))).toEqual([]);
  });

  it('relists on HTTP 410 when resuming from a compacted resourceVersion', async () => {
    const rec = start();
    await api.waitForWatches(1);
    const stale = lw!.resourceVersion;
    api.holdEvents = true;
    api.create(AGENT_SANDBOX, sandbox('missed'));
    api.compact();
    api.holdEvents = false;
    api.dropWatches();
    await rec.until(count('begin', 2), 'the relist');
    await rec.until((items) => items.filter((x) => x.startsWith('end')).length === 2, 'the relist to end');
    expect(rec.items).toContain('item team-a/missed');
    // The reconnect asked for the compacted version (answered 410), then listed again.
    expect(api.watches()[1]!.query.resourceVersion).toBe(stale);
    expect(api.lists()).toHaveLength(2);
    await api.waitForWatches(3);
    expect(api.watches()[2]!.query.resourceVersion).toBe(api.resourceVersion);
  });

  it('restarts a paged list whose continue token expired', async () => {
    for (let i = 0; i < 5; i++) api.create(AGENT_SANDBOX, sandbox(`s${i}`));
    api.failNext('list', 410, 1, 1);
    const rec = start({ pageSize: 2 });
    await rec.until((items) => items.some((x) => x.startsWith('end')), 'the list');
    expect(rec.items.filter((x) => x === 'begin')).toHaveLength(2);
    expect(rec.items.filter((x) => x.startsWith('item'))).toHaveLength(1 * 2 + 5);
    expect(api.lists()).toHaveLength(5);
  });

  // Starts like the dropped-connection test above: one event seen, so there is a resourceVersion to
  // resume from; the fault that breaks the watch differs.
  it('reports a malformed line and reconnects from the last resourceVersion', async () => {
    const rec = start();
    await api.waitForWatches(1);
    api.create(AGENT_SANDBOX, sandbox('a'));
    const rv = api.resourceVersion;
    await rec.until(has(`ADDED team-a/a ${rv}`), 'the event');
    api.writeRaw('{"type":"ADDED","object":{oops\n');
    await api.waitForWatches(2);
    expect(api.watches()[1]!.query.resourceVersion).toBe(rv);
    expect(rec.items).toContain('error WatchProtocolError');
    expect(api.lists()).toHaveLength(1);
  });

  it('reports a non-410 ERROR event and reconnects without a relist', async () => {
    const rec = start();
    await api.waitForWatches(1);
    api.writeRaw(JSON.stringify({ type: 'ERROR', object: { kind: 'Status', code: 500, reason: 'InternalError', message: 'etcd unavailable' } }) + '\n');
    await api.waitForWatches(2);
    await rec.until(has('error InternalError'), 'the error');
    expect(api.lists()).toHaveLength(1);
  });

  it('takes a silent watch connection for dead after idleTimeoutMs and resumes it', async () => {
    const rec = start({ idleTimeoutMs: 50 });
    await api.waitForWatches(2);
    expect(api.watches()[1]!.query.resourceVersion).toBe(api.watches()[0]!.query.resourceVersion);
    expect(rec.items.some((x) => x.startsWith('error'))).toBe(true);
    expect(api.lists()).toHaveLength(1);
  });

  it('relists on an ERROR event whose Status says Expired without a code', async () => {
    const rec = start();
    await api.waitForWatches(1);
    api.writeRaw(JSON.stringify({ type: 'ERROR', object: { kind: 'Status', reason: 'Expired', message: 'too old resource version' } }) + '\n');
    await rec.until(count('begin', 2), 'the relist');
    expect(rec.items.filter((x) => x.startsWith('error'))).toEqual([]);
  });

  it('reconnects at once, without reporting, when the server ends a watch cleanly', async () => {
    const rec = start();
    await api.waitForWatches(1);
    api.create(AGENT_SANDBOX, sandbox('a'));
    await rec.until((items) => items.some((x) => x.startsWith('ADDED')), 'the event');
    api.endWatches();
    await api.waitForWatches(2);
    expect(rec.items.filter((x) => x.startsWith('error'))).toEqual([]);
    expect(api.lists()).toHaveLength(1);
  });

  it('retries a failing list with backoff and reports each failure', async () => {
    api.failNext('list', 503, 2);
    const rec = start();
    await rec.until((items) => items.some((x) => x.startsWith('end')), 'the list');
    expect(rec.items.filter((x) => x.startsWith('error'))).toEqual(['error InternalError', 'error InternalError']);
    expect(api.lists()).toHaveLength(3);
  });

  it('counts an unserved resource (404: CRD not installed) as an empty list and checks again', async () => {
    const rec = start({}, '/apis/example.dev/v1/sandboxes');
    await rec.until(count('end not-served', 2), 'two attempts');
    expect(rec.items).toContain('error NotFound');
    expect(api.watches()).toHaveLength(0);
  });

  it('stops promptly while waiting in backoff and leaves no timer or socket behind', async () => {
    const before = process.getActiveResourcesInfo().filter((r) => r === 'Timeout' || r === 'TCPSocketWrap').length;
    api.failNext('list', 500, 1000);
    const rec = start({ backoff: { initialMs: 60_000, maxMs: 60_000 } });
    await rec.until(has('error InternalError'), 'the first failure');
    await lw!.stop();
    lw = undefined;
    await new Promise((r) => setImmediate(r));
    const after = process.getActiveResourcesInfo().filter((r) => r === 'Timeout' || r === 'TCPSocketWrap').length;
    expect(after).toBeLessThanOrEqual(before);
  });
});

describe('watch wire format', () => {
  it('parses each event type and refuses malformed ones', () => {
    expect(parseWatchEvent('{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"12"}}}')).toEqual({ type: 'BOOKMARK', resourceVersion: '12' });
    expect(parseWatchEvent('{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old"}}')).toEqual({
      type: 'ERROR',
      status: { code: 410, reason: 'Expired', message: 'too old' },
    });
    expect(parseWatchEvent('{"type":"MODIFIED","object":{"metadata":{"resourceVersion":"7"}}}')).toMatchObject({ type: 'MODIFIED', resourceVersion: '7' });
    for (const bad of ['', 'null', '[]', '{"type":"ADDED"}', '{"type":"NOPE","object":{}}', '{"type":"BOOKMARK","object":{}}', '{"type":"ADDED","object":[]}']) {
      expect(() => parseWatchEvent(bad), bad).toThrow(/watch|BOOKMARK/);
    }
  });

  it('splits lines across arbitrary chunk boundaries and bounds line length', () => {
    const lines: string[] = [];
    const s = new LineSplitter(32);
    const text = Buffer.from('{"a":"é"}\n\n{"b":2}\r\n{"c":3}', 'utf8');
    for (let i = 0; i < text.length; i++) s.push(text.subarray(i, i + 1), (l) => lines.push(l));
    s.end((l) => lines.push(l));
    expect(lines).toEqual(['{"a":"é"}', '{"b":2}', '{"c":3}']);
    expect(() => s.push(Buffer.alloc(40, 0x61), () => undefined)).toThrow(/longer than 32/);
  });
});

import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { SandboxWatch } from '../../src/api/sandbox-watch.js';
import { SandboxView } from '../../src/view/sandbox-view.js';
import { ActivityLog } from '../../src/lifecycle/activity-log.js';
import { eventually } from '../helpers/eventually.js';
import { snapshot } from '../helpers/snapshots.js';
import { readEvents } from '../helpers/sse.js';

/**
 * The watch's history is kept while someone watches and for a grace period after the last watcher left;
 * outside it changes are not kept, and a reconnect from before that gap must get a reset and the full
 * state — never a replay that silently skips the changes made while nothing was kept.
 */
describe('SandboxWatch history (kept only while watchers may resume)', () => {
  const GRACE = 60_000;
  let clock = 0;
  let view: SandboxView;
  let watch: SandboxWatch;
  let server: Server;
  let url: string;
  let rv = 1;

  const upsert = (name: string): void => {
    view.apply('d', { type: 'upsert', snapshot: snapshot({ name, uid: 'uid-' + name, resourceVersion: String(++rv), sessionModel: 'none' }) });
  };

  beforeEach(async () => {
    clock = 1_000_000;
    view = new SandboxView({ now: () => clock });
    view.registerDriver('d');
    view.replace('d', [snapshot({ name: 'a', uid: 'uid-a', sessionModel: 'none' })]);
    watch = new SandboxWatch(view, new ActivityLog(view, 0), { historyGraceMs: GRACE, now: () => clock });
    server = createServer((req, res) => watch.serve(req, res, new URL(req.url!, 'http://x')));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
  });

  afterEach(async () => {
    watch.close();
    await new Promise((r) => server.close(r));
  });

  /** Connects, reads the full state up to `synced`, disconnects and waits until the watch saw it leave. */
  async function watchOnce(): Promise<string> {
    const events = await readEvents(await fetch(url), 2 + view.size);
    await eventually(() => watch.watchers === 0, 5000, 'the watcher to leave');
    return events.at(-1)!.id!;
  }

  it('replays the changes missed by a watcher that reconnects within the grace period', async () => {
    const last = await watchOnce();
    clock += GRACE - 1;
    upsert('b');
    upsert('c');
    const resumed = await readEvents(await fetch(url, { headers: { 'last-event-id': last } }), 2);
    expect(resumed.map((e) => [e.event, e.data.name])).toEqual([
      ['upsert', 'b'],
      ['upsert', 'c'],
    ]);
  });

  it('resets a watcher that reconnects after changes went unkept, even when later ones were kept', async () => {
    const last = await watchOnce();
    clock += GRACE;
    upsert('b'); // not kept: nobody watches and the grace is over
    // Another watcher comes and goes: changes are kept again from here on.
    await watchOnce();
    upsert('c');
    const resumed = await readEvents(await fetch(url, { headers: { 'last-event-id': last } }), 1 + view.size + 1);
    expect(resumed[0]!.event).toBe('reset');
    expect(resumed.filter((e) => e.event === 'upsert').map((e) => e.data.name).sort()).toEqual(['a', 'b', 'c']);
    expect(resumed.at(-1)!.event).toBe('synced');
  });

  it('keeps nothing before the first watcher, and the first reconnect from an old id gets the full state', async () => {
    upsert('b');
    const fresh = await readEvents(await fetch(url, { headers: { 'last-event-id': '1' } }), 1);
    expect(fresh[0]!.event).toBe('reset');
  });
});

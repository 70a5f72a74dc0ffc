import { randomBytes } from 'node:crypto';
import { announceReady, exitWithParent, serveIpc } from './ipc.js';

/**
 * One tenant revoking links as fast as the operator API answers, from `concurrency` loops, each revoke a
 * new id of the tenant's namespace (a made-up one: its namespace's shape, no link behind it), so every
 * revoke reaches the store. In a process of its own, so its work never shares a core with the load.
 */

interface Run {
  stop: boolean;
  revoked: number;
  refused: number;
  startedAt: number;
  loops: Promise<void>[];
}

let run: Run | undefined;

async function loop(r: Run, url: string, key: string, namespace: string): Promise<void> {
  while (!r.stop) {
    const id = `l_${namespace}_${Math.floor(Date.now() / 1000 + 3600).toString(36)}_${randomBytes(12).toString('base64url')}`;
    const res = await fetch(url + id, { method: 'DELETE', headers: { 'x-api-key': key } });
    await res.arrayBuffer();
    if (res.status === 200) r.revoked++;
    else r.refused++;
  }
}

serveIpc({
  start(a: { url: string; key: string; namespace: string; concurrency: number }) {
    const r: Run = { stop: false, revoked: 0, refused: 0, startedAt: performance.now(), loops: [] };
    for (let i = 0; i < a.concurrency; i++) r.loops.push(loop(r, a.url, a.key, a.namespace));
    run = r;
    return {};
  },
  async stop() {
    const r = run;
    if (r === undefined) throw new Error('not started');
    r.stop = true;
    await Promise.all(r.loops);
    return { revoked: r.revoked, refused: r.refused, seconds: (performance.now() - r.startedAt) / 1000 };
  },
});
announceReady({});
exitWithParent();

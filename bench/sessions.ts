import { row, type Row } from './lib/report.js';
import { writeSandboxesFile } from './lib/sandboxes.js';
import { type BenchContext, type Section } from './lib/section.js';
import { sessionArgs, Swarm, untilReady, writeSecret } from './lib/session-swarm.js';
import { startBare, startGateway, type Target } from './lib/targets.js';

/**
 * 7. Sessions: N concurrent supervisor sessions (10k; 1k in --quick) on one gateway with in-memory
 * presence — heap and RSS per session after GC, time for all to connect, time for a reconnect storm to be
 * all Ready in the gateway's view — against a bare `ws` server holding the same sessions. Sessions on
 * Redis presence, and its failover, are the redis-ha section's.
 */

const TIMEOUT_MS = 180_000;

interface Held {
  readonly heapPerSession: number;
  readonly rssPerSession: number;
  readonly connectMs: number;
  readonly stormMs: number;
  readonly stormAcceptedMs: number;
}

/**
 * Opens `count` sessions on `target`, measures heap/RSS after GC with and without them, then closes them
 * all and reconnects them at once. `gateway` says whether "all Ready" is read from the target's view (the
 * gateway) or from the sessions' own `accepted` (the bare server, which has no view).
 */
async function hold(ctx: BenchContext, target: Target, count: number, secretFile: string, gateway: boolean): Promise<Held> {
  const swarm = await Swarm.start(ctx.procs, [target.supervisorUrl], secretFile, `swarm-${target.name}`);
  try {
    const before = await target.heap();
    ctx.log(`sessions: ${count} sessions to ${target.name}`);
    const { startedAt, done } = await swarm.open(0, count, TIMEOUT_MS);
    if (done.timedOut) throw new Error(`${target.name}: only ${done.accepted} of ${count} sessions were accepted (${done.firstError ?? 'no error seen'})`);
    const connectedAt = gateway ? await untilReady(target.adminUrl, (n) => n === count, TIMEOUT_MS) : done.lastAcceptedAt;
    const after = await target.heap();
    await swarm.close();
    if (gateway) await untilReady(target.adminUrl, (n) => n === 0, TIMEOUT_MS);
    ctx.log(`sessions: reconnect storm of ${count} on ${target.name}`);
    const stormAt = await swarm.reconnect();
    const storm = await swarm.waitAccepted(count, stormAt, TIMEOUT_MS);
    if (storm.timedOut) throw new Error(`${target.name}: only ${storm.accepted} of ${count} sessions came back after the storm (${storm.firstError ?? 'no error seen'})`);
    const readyAt = gateway ? await untilReady(target.adminUrl, (n) => n === count, TIMEOUT_MS) : storm.lastAcceptedAt;
    return {
      heapPerSession: (after.heapUsed - before.heapUsed) / count,
      rssPerSession: (after.rss - before.rss) / count,
      connectMs: connectedAt - startedAt,
      stormMs: readyAt - stormAt,
      stormAcceptedMs: storm.lastAcceptedAt - stormAt,
    };
  } finally {
    await swarm.stop();
  }
}

export const sessions: Section = {
  id: 'sessions',
  title: '7. Sessions (supervisor sessions on one gateway vs a bare ws server)',
  estimateSeconds: { quick: 30, full: 90 },
  async run(ctx) {
    const count = ctx.quick ? 1_000 : 10_000;
    const secretFile = writeSecret(ctx.tmp);
    const sandboxes = writeSandboxesFile(ctx.tmp, count, 'required');
    const rows: Row[] = [];
    const notes: string[] = [];

    const gw = await startGateway(ctx.procs, { name: 'sandgate-sessions', sandboxes, args: sessionArgs(secretFile) }, ctx.targetOptions);
    const g = await hold(ctx, gw, count, secretFile, true);
    await gw.stop();
    const bare = await startBare(ctx.procs, 'bare-ws', 'lib/bare-ws-server.js', ctx.targetOptions);
    const b = await hold(ctx, bare, count, secretFile, false);
    await bare.stop();
    const n = count.toLocaleString('en-US');
    rows.push(row(`heap per session @ ${n} sessions`, 'B', g.heapPerSession, b.heapPerSession));
    rows.push(row(`RSS per session @ ${n} sessions`, 'B', g.rssPerSession, b.rssPerSession));
    rows.push(row(`${n} sessions connect, all Ready`, 'ms', g.connectMs, b.connectMs, 'baseline: all accepted'));
    rows.push(row(`reconnect storm of ${n}, all Ready`, 'ms', g.stormMs, b.stormMs, 'baseline: all accepted'));
    notes.push(
      `storm: every session closed, then all reconnect within 50 ms (the reference supervisor after 1012); the gateway's "all Ready" is read from its view (/metrics), ` +
        `its last session was accepted after ${Math.round(g.stormAcceptedMs)} ms`,
    );

    return { baseline: 'bare ws server holding the same sessions', rows, targets: [], notes, data: { count, sandgate: g, bareWs: b } };
  },
};

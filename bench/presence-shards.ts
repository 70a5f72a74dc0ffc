import { Redis } from 'ioredis';
import { createLogger, MemoryLogSink } from '../src/observability/logger.js';
import { createRedisPresence, type RedisPresence } from '../src/sessions/presence/redis-presence.js';
import { runScript } from '../src/sessions/presence/redis-script-runner.js';
import { presenceKeys, scriptKeys, SCRIPTS, shardOf } from '../src/sessions/presence/redis-scripts.js';
import { spread } from './lib/compare.js';
import { sleep } from './lib/processes.js';
import { callDelta, startRedis, type BenchRedis } from './lib/redis.js';
import { row, target, type Row } from './lib/report.js';
import { type BenchContext, type Section } from './lib/section.js';

/**
 * 11. Presence shards (`--presence-shards`, docs/presence.md "Shards"), on a redis-server of its own:
 *
 * - how long one `snapshot` script blocks Redis with 100,000 presence records, unsharded (S = 1) and in 16
 *   shards (one shard's scan, and all 16 walked one by one), from the server's own time per call
 *   (`INFO commandstats`, usec of `evalsha`), so the client's decoding is left out;
 * - what renewing in every shard costs: Redis commands/s and scripts/s of three idle gateways' stores with
 *   S = 16 beside S = 1 (the stores run in this process; Redis counts the commands the same way).
 */

const RECORDS = 100_000;
const GATEWAYS = 3;
const LEASE_TTL_MS = 10_000;

/** Server time (ms) and calls of `evalsha` since the last CONFIG RESETSTAT. */
async function evalshaTime(admin: Redis): Promise<{ ms: number; calls: number }> {
  const text = await admin.info('commandstats');
  const m = /cmdstat_evalsha:calls=(\d+),usec=(\d+)/.exec(text);
  return m === null ? { ms: 0, calls: 0 } : { ms: Number(m[2]) / 1000, calls: Number(m[1]) };
}

/** Writes `RECORDS` presence records under `prefix`, each in its shard of `shards`. */
async function fill(admin: Redis, prefix: string, shards: number): Promise<void> {
  const record = (i: number): string => JSON.stringify({ g: 'bench-gw', i: 'bench-inc', s: `s${i}`, n: `n${i}`, e: '1', t: '1' });
  for (let from = 0; from < RECORDS; from += 5_000) {
    const byShard = new Map<number, string[]>();
    for (let i = from; i < Math.min(RECORDS, from + 5_000); i++) {
      const field = `bench/sb-${i}`;
      const k = shardOf(field, shards);
      let args = byShard.get(k);
      if (args === undefined) byShard.set(k, (args = []));
      args.push(field, record(i));
    }
    const p = admin.pipeline();
    for (const [k, args] of byShard) p.hset(presenceKeys(prefix, k).presence, ...args);
    await p.exec();
  }
}

/**
 * Passes over every shard whose figures are kept: one snapshot call is one sample, and on a shared 2-core
 * machine a single call moves by a third (the longest of 16 single calls read 12.3 … 16.1 ms against
 * 6.7 … 8 for the rest), so each shard's figure is the median of its calls.
 */
const PASSES = 5;

/**
 * Server time of one snapshot of each shard and the client's wall time of it: each the median of PASSES
 * calls, the shards taken one after another in each pass.
 */
async function snapshots(admin: Redis, prefix: string, shards: number): Promise<{ server: number[]; wall: number[] }> {
  // Cached first, so every measured call is one EVALSHA (a NOSCRIPT miss would time the EVAL apart).
  await admin.script('LOAD', SCRIPTS.snapshot.lua);
  // A scan names the term it was made in (the script refuses another master's): adopt each shard's term first.
  const terms: number[] = [];
  for (let k = 0; k < shards; k++) terms.push(((await runScript(admin, SCRIPTS.term, scriptKeys(presenceKeys(prefix, k)), [presenceKeys(prefix, k).channel, 0])) as [number])[0]);
  // One unmeasured pass first. Measured right after the term scripts, the last shards' scans ran ~1.7× slower,
  // with the term check in the snapshot script or without it, so that was not the check's cost.
  for (let k = 0; k < shards; k++) await runScript(admin, SCRIPTS.snapshot, scriptKeys(presenceKeys(prefix, k)), [presenceKeys(prefix, k).channel, terms[k]!]);
  const server: number[][] = Array.from({ length: shards }, () => []);
  const wall: number[][] = Array.from({ length: shards }, () => []);
  for (let pass = 0; pass < PASSES; pass++) {
    for (let k = 0; k < shards; k++) {
      await admin.config('RESETSTAT');
      const t0 = performance.now();
      const reply = await runScript(admin, SCRIPTS.snapshot, scriptKeys(presenceKeys(prefix, k)), [presenceKeys(prefix, k).channel, terms[k]!]);
      wall[k]!.push(performance.now() - t0);
      if (!Array.isArray(reply)) throw new Error(`the snapshot of shard ${k} was refused (term ${terms[k]})`);
      server[k]!.push((await evalshaTime(admin)).ms);
    }
  }
  return { server: server.map((v) => spread(v).median), wall: wall.map((v) => spread(v).median) };
}

/** Redis commands/s and scripts/s of `GATEWAYS` idle stores with `shards` shards. */
async function renewRate(redis: BenchRedis, shards: number, ms: number): Promise<{ commands: number; scripts: number; byCommand: Record<string, number> }> {
  const stores: RedisPresence[] = [];
  try {
    for (let g = 0; g < GATEWAYS; g++) {
      const s = createRedisPresence({ url: redis.url, gatewayId: `renew-${g}`, leaseTtlMs: LEASE_TTL_MS, rescanMs: 3_600_000, keyPrefix: `bench-renew-${shards}`, shards, log: createLogger('silent', new MemoryLogSink()) });
      stores.push(s);
      await s.start();
    }
    // Past the start-up scans and term adoption: only renewals from here.
    await sleep(LEASE_TTL_MS / 3);
    const before = await redis.commandCalls();
    await sleep(ms);
    const byCommand = callDelta(before, await redis.commandCalls());
    const total = Object.values(byCommand).reduce((a, b) => a + b, 0);
    return { commands: (total * 1000) / ms, scripts: (((byCommand.evalsha ?? 0) + (byCommand.eval ?? 0)) * 1000) / ms, byCommand };
  } finally {
    await Promise.all(stores.map((s) => s.close({ release: true })));
  }
}

export const presenceShards: Section = {
  id: 'presence-shards',
  title: '11. Presence shards (snapshot blocking at 100k records, renewal cost of 16 shards)',
  async run(ctx: BenchContext) {
    const idleMs = ctx.quick ? 7_000 : 20_000;
    let redis: BenchRedis;
    try {
      redis = await startRedis(ctx.procs);
    } catch (err) {
      const reason = `skipped: ${(err as Error).message.split('\n')[0]}`;
      return { baseline: '-', rows: [], targets: [target('one shard of 16 blocks Redis ≤ 1/8 as long as the unsharded scan', undefined, reason)], notes: [], data: { skipped: reason } };
    }
    const admin = new Redis(redis.url, { maxRetriesPerRequest: 1 });
    try {
      const rows: Row[] = [];
      const n = RECORDS.toLocaleString('en-US');
      ctx.log(`presence-shards: ${n} records, 1 shard`);
      await fill(admin, 'bench-s1', 1);
      const unsharded = await snapshots(admin, 'bench-s1', 1);
      const one = unsharded.server[0]!;
      ctx.log(`presence-shards: ${n} records, 16 shards`);
      await fill(admin, 'bench-s16', 16);
      const sharded = await snapshots(admin, 'bench-s16', 16);
      const sixteen = sharded.server;
      const longest = Math.max(...sixteen);
      const sum = sixteen.reduce((a, b) => a + b, 0);
      rows.push(row(`one snapshot script, ${n} records, unsharded (Redis blocked)`, 'ms', one, undefined, `${((one * 1000) / RECORDS).toFixed(1)} µs per record`));
      rows.push(row(`the same, as the client waits (reply transfer and decoding included)`, 'ms', unsharded.wall[0], undefined, 'wall time'));
      rows.push(row(`one shard's snapshot of 16, as the client waits (the longest)`, 'ms', Math.max(...sharded.wall), unsharded.wall[0], 'vs unsharded'));
      rows.push(row(`one shard's snapshot, ${n} records in 16 shards (the longest of the 16)`, 'ms', longest, one, 'vs unsharded'));
      rows.push(row('all 16 shards scanned one after another (sum; Redis serves others between them)', 'ms', sum, one, 'vs unsharded'));

      ctx.log(`presence-shards: renewals of ${GATEWAYS} idle gateways, 1 and 16 shards (${idleMs} ms each)`);
      const r1 = await renewRate(redis, 1, idleMs);
      const r16 = await renewRate(redis, 16, idleMs);
      rows.push(row(`Redis commands/s, ${GATEWAYS} idle gateways, 16 shards (lease TTL 10 s)`, '/s', r16.commands, r1.commands, 'vs 1 shard'));
      rows.push(row(`scripts/s, ${GATEWAYS} idle gateways, 16 shards`, '/s', r16.scripts, r1.scripts, 'vs 1 shard'));
      const perRecordUs = (one * 1000) / RECORDS;
      const at1M64 = (perRecordUs * 1_000_000) / 64 / 1000;
      const pass = longest * 8 <= one;
      return {
        baseline: 'see each row',
        rows,
        targets: [target('one shard of 16 blocks Redis ≤ 1/8 as long as the unsharded scan', pass, `${longest.toFixed(1)} ms vs ${one.toFixed(1)} ms`)],
        notes: [
          `Presence shards: snapshot time is Redis's own (commandstats usec of evalsha); extrapolated at ${perRecordUs.toFixed(1)} µs per record, 1,000,000 sandboxes in 64 shards block Redis ≈ ${at1M64.toFixed(0)} ms per shard scan`,
          `Presence shards: idle renewal commands by command, 16 shards: ${JSON.stringify(r16.byCommand)}`,
        ],
        data: { records: RECORDS, snapshotMs: { one, sixteen, wallOne: unsharded.wall[0], wallSixteen: sharded.wall }, renew: { one: r1, sixteen: r16 }, at1M64Ms: at1M64 },
      };
    } finally {
      admin.disconnect();
      redis.close();
    }
  },
};

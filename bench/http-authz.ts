import { alternate, alternateHttp, BLOCKS, compareCost, floorText, idleNote, compareRate, costData, costNotes, costRows, costTarget, noiseFloor, PAIRS } from './lib/cost.js';
import { authzRequests, httpLoad } from './lib/http-load.js';
import { warmUp } from './lib/interleave.js';
import { loadRows, measured, paired, runData, runProblems } from './lib/measure.js';
import type { Row, TargetResult } from './lib/report.js';
import { writeSandboxesFile } from './lib/sandboxes.js';
import { timing, type Section, type Timing } from './lib/section.js';
import { startBare, startGateway, type Target } from './lib/targets.js';

/**
 * 1. HTTP authz: sandgate's `/authz/…` (the nginx auth_request / Envoy http_service door) against a bare
 * node:http server that sends the same 200 without deciding anything. Judged on CPU per request at a fixed
 * offered rate, the two interleaved (cost.ts alternateHttp), with req/s at the limit (autocannon, 64
 * connections) beside it, and the same cost trials between two copies of the bare server (the noise floor)
 * beside the verdict; latency rows at 1, 16, 64 and 256 connections. The view holds 1k Ready sandboxes; requests name them by Host.
 */

const SANDBOXES = 1000;
const CONNECTIONS = [1, 16, 64, 256] as const;
/** The operating point the target is judged at. */
const JUDGED_AT = 64;
/** Offered in the cost trials: well under what either side answers on a busy 2-core machine. */
const RATE = 8000;
const MAX_EXTRA_US = 2;
const MIN_RATIO = 0.85;

export const httpAuthz: Section = {
  id: 'http-authz',
  title: '1. HTTP authz (1k sandboxes)',
  async run(ctx) {
    const t = timing(ctx, { warmupMs: 250, durationMs: 1200 }, { warmupMs: 1000, durationMs: 6000 });
    const tCost = timing(ctx, { warmupMs: 300, durationMs: 2000 }, { warmupMs: 1000, durationMs: 5000 });
    const pairs = PAIRS;
    const file = writeSandboxesFile(ctx.tmp, SANDBOXES, 'none');
    const gw = await startGateway(ctx.procs, { name: 'sandgate-http', sandboxes: file }, ctx.targetOptions);
    const bare = await startBare(ctx.procs, 'bare-http', 'lib/bare-http-server.js', ctx.targetOptions);
    const bareCopy = await startBare(ctx.procs, 'bare-http-copy', 'lib/bare-http-server.js', ctx.targetOptions);
    const requests = authzRequests(SANDBOXES);
    const side = (tgt: Target) => ({ target: tgt, url: tgt.adminUrl });
    const at = (tgt: Target, connections: number) => (w: Timing) => measured(tgt, w, () => httpLoad({ url: tgt.adminUrl, connections, ...w, sandboxes: SANDBOXES }));
    const rows: Row[] = [];
    const notes: string[] = [];
    const data: Record<string, unknown> = {};

    ctx.log('http authz: warming both up');
    // The copy too: a process measured colder than the one it is compared with reads dearer.
    await warmUp({ gw: at(gw, JUDGED_AT), bare: at(bare, JUDGED_AT), copy: at(bareCopy, JUDGED_AT) }, ctx.quick ? 1000 : 3000);
    notes.push(await idleNote(`@ ${JUDGED_AT} conn`, RATE, { sandgate: gw, 'bare http': bare }, ctx.quick ? 1000 : 3000));
    ctx.log(`http authz: CPU per request at ${RATE} req/s, ${BLOCKS} interleaved pairs`);
    const cost = compareCost(
      RATE,
      await alternateHttp(tCost, RATE, JUDGED_AT, requests, [side(gw)], [side(bare)]),
      { a: 'sandgate', b: 'bare http' },
    );
    ctx.log(`http authz: noise floor, a second bare node:http against the first, ${BLOCKS} interleaved pairs`);
    const floor = await noiseFloor(tCost, RATE, JUDGED_AT, requests, [side(bareCopy)], [side(bare)]);
    notes.push(`@ ${JUDGED_AT} conn: ${floorText(floor)}`);
    ctx.log(`http authz: req/s at the limit @ ${JUDGED_AT} connections, ${pairs} pairs`);
    const rate = compareRate(await alternate(pairs, t, at(gw, JUDGED_AT), at(bare, JUDGED_AT)));
    rows.push(...costRows(`@ ${JUDGED_AT} conn`, cost, rate));
    notes.push(...costNotes(`@ ${JUDGED_AT} conn`, cost, rate));
    for (const [k, m] of rate.a.entries()) notes.push(...runProblems(`sandgate @ ${JUDGED_AT}, trial ${k + 1}`, m));
    data.judged = costData(cost, rate);
    data.noiseFloor = costData(floor, undefined);

    for (const connections of CONNECTIONS) {
      if (connections === JUDGED_AT) continue;
      ctx.log(`http authz: ${connections} connections`);
      const { g, b } = await paired(gw, bare, t, (tgt, w) => httpLoad({ url: tgt.adminUrl, connections, ...w, sandboxes: SANDBOXES }));
      rows.push(...loadRows(`@ ${connections} conn`, g, b));
      notes.push(...runProblems(`sandgate @ ${connections}`, g), ...runProblems(`bare http @ ${connections}`, b));
      data[`c${connections}`] = { sandgate: runData(g), bare: runData(b) };
    }
    const targets: TargetResult[] = [costTarget('HTTP authz vs bare node:http', MAX_EXTRA_US, cost, { r: rate, min: MIN_RATIO }, floor)];
    return { baseline: 'bare node:http', rows, targets, notes, data };
  },
};

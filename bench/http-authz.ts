import { compareCost, compareHttp, compareRate, costNotes, costRows, costTarget, floorText, idleNote, limitRows, trialProblems, trialsData, type HttpSide, type RateComparison } from './lib/compare.js';
import type { Row } from './lib/report.js';
import { authzRequests, writeSandboxesFile } from './lib/sandboxes.js';
import { blocks, type Section } from './lib/section.js';
import { startBare, startGateway, type Target } from './lib/targets.js';

/**
 * 1. HTTP authz: sandgate's `/authz/…` (the nginx auth_request / Envoy http_service door) against a bare
 * node:http server that sends the same 200 without deciding anything. Judged on CPU per request at a fixed
 * offered rate, with req/s at the limit beside it and the same cost trials between two copies of the bare
 * server (the noise floor) beside the verdict; latency at 1, 16, 64 and 256 connections. The view holds 1k
 * Ready sandboxes; requests name them by Host.
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
    const plan = blocks(ctx);
    const file = writeSandboxesFile(ctx.tmp, SANDBOXES, 'none');
    const gw = await startGateway(ctx.procs, { name: 'sandgate-http', sandboxes: file }, ctx.targetOptions);
    const bare = await startBare(ctx.procs, 'bare-http', 'lib/bare-http-server.js', ctx.targetOptions);
    const copy = await startBare(ctx.procs, 'bare-http-copy', 'lib/bare-http-server.js', ctx.targetOptions);
    const requests = authzRequests(SANDBOXES);
    const side = (t: Target): HttpSide[] => [{ target: t, url: t.adminUrl }];
    const rows: Row[] = [];
    const notes: string[] = [await idleNote(`@ ${JUDGED_AT} conn`, RATE, { sandgate: gw, 'bare http': bare }, ctx.quick ? 1000 : 3000)];
    const data: Record<string, unknown> = {};

    const cost = { ...plan, rate: RATE, inFlight: JUDGED_AT };
    ctx.log(`http authz: CPU per request at ${RATE} req/s, ${plan.blocks} pairs; then the noise floor`);
    const judged = compareCost(RATE, await compareHttp(cost, requests, side(gw), side(bare)), { a: 'sandgate', b: 'bare http' });
    const floor = compareCost(RATE, await compareHttp(cost, requests, side(copy), side(bare)), { a: 'copy', b: 'bare http' });
    notes.push(`@ ${JUDGED_AT} conn: ${floorText(floor)}`);
    let rate: RateComparison | undefined;
    for (const connections of CONNECTIONS) {
      ctx.log(`http authz: at the limit, ${connections} connections`);
      // The judged point gets the full count of pairs; the others' latency rows, three.
      const r = await compareHttp({ ...plan, inFlight: connections, blocks: connections === JUDGED_AT ? plan.blocks : 3 }, requests, side(gw), side(bare));
      rows.push(...limitRows(`@ ${connections} conn`, r));
      notes.push(...trialProblems({ a: `sandgate @ ${connections}`, b: `bare http @ ${connections}` }, r));
      data[`c${connections}`] = trialsData(r);
      if (connections === JUDGED_AT) rate = compareRate(r);
    }
    rows.unshift(...costRows(`@ ${JUDGED_AT} conn`, judged, undefined));
    notes.push(...costNotes(`@ ${JUDGED_AT} conn`, judged, rate));
    data.cost = trialsData(judged);
    data.noiseFloor = trialsData(floor);
    const targets = [costTarget('HTTP authz vs bare node:http', MAX_EXTRA_US, judged, { r: rate!, min: MIN_RATIO }, floor)];
    return { baseline: 'bare node:http', rows, targets, notes, data };
  },
};

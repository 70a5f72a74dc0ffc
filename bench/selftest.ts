import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { cpus, loadavg } from 'node:os';
import type { Measured } from './lib/alternation.js';
import { cpuPerRequest, grpcPair, httpPair, type HttpSide } from './lib/compare.js';
import { ProcessGroup } from './lib/processes.js';
import { startBare, Target } from './lib/targets.js';

/**
 * `npm run bench -- --selftest`: the harness checked against servers on loopback, with nothing of the
 * gateway under test (the checks are listed in selftest() by what they assert). They read completion
 * rates and schedules, which a loaded machine can disturb, so they live here and not in `npm test`.
 */

/** A loopback server that answers 200 and notes when each request arrived and how many were open at once. */
async function server(holdMs: number): Promise<{ server: Server; url: string; arrivals: number[]; maxOpen: () => number }> {
  const arrivals: number[] = [];
  let open = 0;
  let maxOpen = 0;
  const s = createServer((_req, res) => {
    arrivals.push(performance.now());
    maxOpen = Math.max(maxOpen, ++open);
    const answer = (): void => {
      open--;
      res.writeHead(200, { 'content-length': '2' }).end('ok');
    };
    // Held a little where the check counts requests open at once, so they overlap.
    if (holdMs > 0) setTimeout(answer, holdMs);
    else answer();
  });
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  return { server: s, url: `http://127.0.0.1:${(s.address() as AddressInfo).port}`, arrivals, maxOpen: () => maxOpen };
}

type Loopback = Awaited<ReturnType<typeof server>>;

/** Two loopback servers for the length of `check`. */
async function withServers(holdMs: number, check: (a: Loopback, b: Loopback) => Promise<void>): Promise<void> {
  const [a, b] = [await server(holdMs), await server(holdMs)];
  try {
    await check(a, b);
  } finally {
    a.server.close();
    b.server.close();
  }
}

/** A stand-in for a process's CPU counter: `step` µs more at every read, and when it was read. */
function counter(name: string, step: number): { side: (url: string) => HttpSide; reads: number[] } {
  const reads: number[] = [];
  const target = { name, cpuMicrosNow: () => (reads.push(performance.now()), reads.length * step) } as unknown as Target;
  return { side: (url) => ({ target, url }), reads };
}

const REQUESTS = [{ method: 'GET', path: '/x', headers: { host: 'h' } }];

function checkBlocks(blocks: readonly Measured[], expected: number): void {
  for (const m of blocks) {
    assert.equal(m.errors, 0, `errors: ${m.firstError ?? ''}`);
    assert.ok(m.completed > expected * 0.7 && m.completed <= expected + 1, `${m.completed} answered in a block, ${expected} offered`);
  }
}

function httpAtRate(): Promise<void> {
  return withServers(0, async (a, b) => {
    const [ca, cb] = [counter('a', 1000), counter('b', 500)];
    const blockMs = 800;
    const rate = 400;
    const r = await httpPair(REQUESTS, [ca.side(a.url)], [cb.side(b.url)])({ rate, inFlight: 64, warmupMs: blockMs, blockMs, blocks: 3 });
    assert.equal(r.a.length, 3);
    assert.equal(r.b.length, 3);
    // Both counters are read at the start of every measured block and at the end: blocks + 1 times, a block apart.
    assert.equal(ca.reads.length, 4);
    for (let k = 1; k < 4; k++) assert.ok(ca.reads[k]! - ca.reads[k - 1]! > blockMs * 0.8, 'reads a block apart');
    const expected = (rate * blockMs) / 2 / 1000;
    checkBlocks([...r.a, ...r.b], expected);
    // CPU per request of a block is the block's CPU over the side's own answers: 1,000 µs ÷ completed for A.
    assert.ok(Math.abs(cpuPerRequest(r.a[0]!) - 1000 / r.a[0]!.completed) < 1e-6);
    assert.ok(Math.abs(cpuPerRequest(r.b[0]!) - 500 / r.b[0]!.completed) < 1e-6);
    // Each side was loaded only in its own slices: A in the 1st, 4th, 5th and 8th eighth of a block, B in the others.
    const start = ca.reads[0]!;
    const slice = blockMs / 8;
    const stray = (times: readonly number[], own: readonly number[]): number =>
      times.filter((t) => t >= start && t < start + 3 * blockMs).filter((t) => {
        const k = Math.floor((t - start) / slice) % 8;
        const edge = (t - start) % slice;
        return !own.includes(k) && edge > 25 && edge < slice - 25;
      }).length;
    assert.equal(stray(a.arrivals, [0, 3, 4, 7]), 0, 'A loaded outside its slices');
    assert.equal(stray(b.arrivals, [1, 2, 5, 6]), 0, 'B loaded outside its slices');
  });
}

function httpAtLimit(): Promise<void> {
  return withServers(5, async (a, b) => {
    const r = await httpPair(REQUESTS, [counter('a', 1).side(a.url)], [counter('b', 1).side(b.url)])({ inFlight: 8, warmupMs: 300, blockMs: 600, blocks: 2 });
    for (const m of [...r.a, ...r.b]) assert.ok(m.errors === 0 && m.completed > 0, `${m.completed} answered, ${m.errors} errors`);
    // Each side kept its connections busy: 8 open at once, and never more.
    assert.deepEqual([a.maxOpen(), b.maxOpen()], [8, 8], 'requests open at once on each side');
  });
}

async function grpcAlternation(group: ProcessGroup): Promise<void> {
  const [x, y] = [await startBare(group, 'bare-a', 'lib/bare-grpc-server.js'), await startBare(group, 'bare-b', 'lib/bare-grpc-server.js')];
  const pair = grpcPair('check', [{ target: x, sandboxes: 10 }], [{ target: y, sandboxes: 10 }]);
  // Room for 64 calls open (more than a slice's 40): on a busy machine a call may take tens of ms, and the check is of the pacing.
  const plan = { inFlight: 64, warmupMs: 800, blockMs: 800, blocks: 3 };
  const r = await pair({ ...plan, rate: 400 });
  // 400 calls/s for the 400 ms a side carries load in a block.
  checkBlocks([...r.a, ...r.b], 160);
  for (const m of [...r.a, ...r.b]) {
    assert.equal(m.notAllowed, 0);
    // Each server answered its calls: its own CPU over the block is not nothing.
    assert.ok(m.targetCpuCores > 0 && m.loadCpuCores > 0, 'CPU read per block');
  }
  const limit = await pair(plan);
  for (const m of [...limit.a, ...limit.b]) assert.ok(m.errors === 0 && m.completed > 0, `${m.completed} answered at the limit, ${m.errors} errors`);
}

function httpSideGone(): Promise<void> {
  return withServers(0, async (a, b) => {
    let reads = 0;
    // Read once at the start, then its process is gone.
    const gone = { name: 'gone', cpuMicrosNow: () => (++reads > 1 ? assert.fail('bare-http is not running') : 0) } as unknown as Target;
    const run = httpPair(REQUESTS, [counter('a', 1).side(a.url)], [{ target: gone, url: b.url }])({ rate: 200, inFlight: 2, warmupMs: 200, blockMs: 200, blocks: 3 });
    await assert.rejects(run, /bare-http is not running/);
  });
}

export async function selftest(): Promise<number> {
  const group = new ProcessGroup();
  // The rate checks need the cores: on a machine busy with other work they fail, and this says why.
  console.log(`load average ${loadavg()[0]!.toFixed(1)} on ${cpus().length} cores (the rate checks need a quiet machine)`);
  const checks: [string, () => Promise<void>][] = [
    ['HTTP: each side loaded only in its own slices, at the offered rate, CPU divided per block', httpAtRate],
    ['HTTP: at the limit, never more open than the connections, both sides answer', httpAtLimit],
    ['HTTP: a side that can no longer be read fails the run', httpSideGone],
    ['gRPC: both bare servers at the offered rate and at the limit, CPU from /proc', () => grpcAlternation(group)],
  ];
  let failed = 0;
  try {
    for (const [name, check] of checks) {
      try {
        await check();
        console.log(`PASS  ${name}`);
      } catch (err) {
        failed++;
        console.log(`FAIL  ${name}: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
  } finally {
    await group.stopAll();
  }
  return failed === 0 ? 0 : 1;
}

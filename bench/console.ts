import type { Browser, Page } from 'playwright-core';
import { CHROMIUM, CHROMIUM_CANDIDATES, launchChromium } from './lib/chromium.js';
import { row, target, type Row, type TargetResult } from './lib/report.js';
import { writeSandboxesFile } from './lib/sandboxes.js';
import type { BenchContext, Section } from './lib/section.js';
import { startGateway, type Target } from './lib/targets.js';

/**
 * 9. The operator console in headless Chromium at 100k sandboxes, beside the same page at 1k: time to the
 * first rendered row and to the full state (every sandbox streamed through the watch and rendered), the
 * page's JavaScript heap after GC, the DOM rows it keeps (virtualised) and a search over every sandbox.
 */

const SMALL = 1_000;
const LARGE = 100_000;
const MAX_DOM_ROWS = 200;
const MAX_FILTER_MS = 250;

interface PageFigures {
  readonly firstRowMs: number;
  readonly fullMs: number;
  readonly heapBytes: number;
  readonly domRows: number;
  readonly filterMs: number;
}

// Page code is sent as text: the bench has no DOM types, and Runtime.evaluate is not subject to the page's CSP.
const NEXT_FRAME_NOW = 'new Promise((r) => requestAnimationFrame(() => r(performance.now())))';
const SEARCH = `new Promise((resolve) => {
  const input = document.getElementById('search');
  const t0 = performance.now();
  input.value = 'sb-42 sbx-42';
  input.dispatchEvent(new Event('input'));
  requestAnimationFrame(() => resolve({ ms: performance.now() - t0, rows: document.querySelectorAll('.row[data-key]:not([hidden])').length }));
})`;

async function measure(browser: Browser, gw: Target, size: number): Promise<PageFigures> {
  const page: Page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  try {
    // The console is on the operator surface: the ops port when the target has one (every listener flag gets a port).
    await page.goto(`http://127.0.0.1:${gw.ports.ops ?? gw.port('admin')}/console`);
    await page.waitForSelector('.row[data-key]', { timeout: 120_000 });
    const firstRowMs = (await page.evaluate('performance.now()')) as number;
    await page.waitForSelector('body[data-synced="true"]', { timeout: 300_000 });
    const fullMs = (await page.evaluate(NEXT_FRAME_NOW)) as number;
    const shown = (await page.locator('#shown').textContent()) ?? '';
    if (!shown.startsWith(`${size.toLocaleString('en-US')} of`)) throw new Error(`the page shows "${shown}", not ${size} sandboxes`);
    const cdp = await page.context().newCDPSession(page);
    await cdp.send('Performance.enable');
    await cdp.send('HeapProfiler.collectGarbage');
    const { metrics } = await cdp.send('Performance.getMetrics');
    const heapBytes = metrics.find((m) => m.name === 'JSHeapUsedSize')?.value ?? NaN;
    const domRows = (await page.evaluate("document.querySelectorAll('.row[data-key]').length")) as number;
    const search = (await page.evaluate(SEARCH)) as { ms: number; rows: number };
    if (search.rows !== 1) throw new Error(`the search for sandbox 42 showed ${search.rows} rows`);
    return { firstRowMs, fullMs, heapBytes, domRows, filterMs: search.ms };
  } finally {
    await page.close();
  }
}

export const consoleBench: Section = {
  id: 'console',
  title: '9. Operator console (headless Chromium, 100k sandboxes)',
  async run(ctx: BenchContext) {
    const baseline = `the same page with ${SMALL.toLocaleString('en-US')} sandboxes`;
    if (CHROMIUM === undefined) {
      const why = `skipped: no Chromium at ${CHROMIUM_CANDIDATES.join(' or ')}`;
      return { baseline, rows: [], targets: [target('console responsive at 100k sandboxes', undefined, why)], notes: [why] };
    }
    ctx.log('console: gateways with 1k and 100k sandboxes');
    const small = await startGateway(ctx.procs, { name: 'sandgate-1k', sandboxes: writeSandboxesFile(ctx.tmp, SMALL, 'none') });
    const large = await startGateway(ctx.procs, { name: 'sandgate-100k', sandboxes: writeSandboxesFile(ctx.tmp, LARGE, 'none'), readyTimeoutMs: 180_000 });
    const browser = await launchChromium();
    try {
      ctx.log('console: loading the page at 1k and at 100k');
      // One warm-up load: the first page load of a fresh browser also pays for its own start.
      await measure(browser, small, SMALL);
      const s = await measure(browser, small, SMALL);
      const l = await measure(browser, large, LARGE);
      const rows: Row[] = [
        row(`time to first rendered row @ ${LARGE / 1000}k`, 'ms', l.firstRowMs, s.firstRowMs),
        row(`time to full state rendered @ ${LARGE / 1000}k`, 'ms', l.fullMs, s.fullMs),
        row(`page JS heap after GC @ ${LARGE / 1000}k`, 'MB', l.heapBytes / 1e6, s.heapBytes / 1e6),
        row('page JS heap per sandbox', 'B', (l.heapBytes - s.heapBytes) / (LARGE - SMALL), undefined, 'difference between the two pages'),
        row(`DOM rows kept @ ${LARGE / 1000}k`, 'rows', l.domRows, s.domRows),
        row(`search over every sandbox, to the rendered result @ ${LARGE / 1000}k`, 'ms', l.filterMs, s.filterMs),
      ];
      const targets: TargetResult[] = [
        target(`the table is virtualised: ≤ ${MAX_DOM_ROWS} DOM rows at ${LARGE / 1000}k sandboxes`, l.domRows <= MAX_DOM_ROWS, `${l.domRows} rows`),
        target(`a search over ${LARGE / 1000}k sandboxes renders within ${MAX_FILTER_MS} ms`, l.filterMs <= MAX_FILTER_MS, `${l.filterMs.toFixed(0)} ms`),
      ];
      return { baseline, rows, targets, notes: [], data: { small: s, large: l } };
    } finally {
      await browser.close();
    }
  },
};

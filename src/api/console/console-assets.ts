import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { SandgateError } from '../../domain/errors.js';
import { escapeHtml } from './console-table.js';
import { FRAME_ANCESTORS_NONE } from '../respond.js';

/**
 * The console's static files: the page, its scripts and styles (assets/console/ in the package) and
 * uPlot's browser build, resolved from node_modules at start-up (a production dependency, MIT). All are
 * read once into memory; nothing in a request chooses a path on disk — an asset is a name in this map.
 */

interface Asset {
  readonly body: Buffer;
  readonly type: string;
  readonly etag: string;
}

const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
};

/** The page's own files, by the name the page asks for. */
const OWN_FILES = ['console.css', 'console.js', 'sse-reader.js', 'sandbox-store.js', 'sandbox-table.js', 'sandbox-detail.js', 'open-link.js', 'gateways-view.js', 'charts.js'] as const;

/**
 * Scripts only from this origin, no inline script or style, data only from this origin (the API), never
 * framed: the page shows tenant data and holds an API key.
 */
export const CONSOLE_CSP = `default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; ${FRAME_ANCESTORS_NONE}`;

function asset(body: Buffer, name: string): Asset {
  const ext = name.slice(name.lastIndexOf('.'));
  return { body, type: TYPES[ext] ?? 'application/octet-stream', etag: '"' + createHash('sha256').update(body).digest('base64url').slice(0, 22) + '"' };
}

export class ConsoleAssets {
  private readonly assets = new Map<string, Asset>();
  readonly page: Asset;

  /**
   * `dir` is assets/console; `apiKeyHeader` is written into the page so its requests carry the key there.
   * A package missing its console files refuses to start (config_invalid) rather than serve a broken page.
   */
  constructor(dir: string, apiKeyHeader: string) {
    try {
      for (const name of OWN_FILES) this.assets.set(name, asset(readFileSync(join(dir, name)), name));
      const uplot = join(dirname(createRequire(import.meta.url).resolve('uplot/package.json')), 'dist');
      this.assets.set('uplot.min.js', asset(readFileSync(join(uplot, 'uPlot.iife.min.js')), 'uplot.min.js'));
      this.assets.set('uplot.min.css', asset(readFileSync(join(uplot, 'uPlot.min.css')), 'uplot.min.css'));
      const html = readFileSync(join(dir, 'index.html'), 'utf8').replace('%API_KEY_HEADER%', escapeHtml(apiKeyHeader));
      this.page = asset(Buffer.from(html), 'index.html');
    } catch (err) {
      throw new SandgateError('config_invalid', `the console's files are missing (${(err as Error).message}): reinstall the package, or turn the console off with --no-console`, { cause: err });
    }
  }

  get(name: string): Asset | undefined {
    return this.assets.get(name);
  }

  /** Sends an asset (304 when the browser's copy is current; HEAD without the body). */
  send(req: IncomingMessage, res: ServerResponse, a: Asset): void {
    const headers = {
      'content-type': a.type,
      etag: a.etag,
      // Revalidated on every load: a gateway upgrade must never leave an old script beside a new API.
      'cache-control': 'no-cache',
      'x-content-type-options': 'nosniff',
      'referrer-policy': 'no-referrer',
      'content-security-policy': CONSOLE_CSP,
    };
    if (req.headers['if-none-match'] === a.etag) {
      res.writeHead(304, headers).end();
      return;
    }
    res.writeHead(200, { ...headers, 'content-length': String(a.body.length) }).end(req.method === 'HEAD' ? undefined : a.body);
  }
}

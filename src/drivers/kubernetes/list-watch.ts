import type { Logger } from 'pino';
import { Backoff, sleep, type BackoffOptions } from '../../lib/backoff.js';
import { isGone, KubeApiError, type KubeClient } from './kube-client.js';
import { LineSplitter, parseWatchEvent, type WatchEvent } from './watch-stream.js';

const KUBE_BACKOFF: BackoffOptions = { initialMs: 500, maxMs: 30_000, factor: 2, jitter: 0.5 };

/**
 * List-then-watch of one collection (one namespace, or the whole cluster), as client-go's reflector does:
 *
 * 1. LIST in pages (`limit` / `continue`); the list's `metadata.resourceVersion` is where the watch starts.
 *    An expired continue token (410) restarts the list from the first page.
 * 2. WATCH from that resourceVersion with `allowWatchBookmarks=true`; every event and every BOOKMARK
 *    advances the resourceVersion, so a dropped connection resumes where it stopped without a relist.
 * 3. 410 Gone — as the watch's HTTP status or as an ERROR event carrying a Status with code 410 (API
 *    servers do both) — means the resourceVersion was compacted away: relist.
 * 4. Any other failure is reported and retried after a jittered exponential backoff; a clean end of the
 *    watch (its `timeoutSeconds` ran out) reconnects at once.
 *
 * 404 on the first page means the resource is not served (the CRD is not installed): it counts as an
 * empty list, so the gateway is not held unready forever by a kind the cluster does not have, and the
 * list is retried with backoff until the CRD appears.
 */

export type ObjectEvent = Extract<WatchEvent, { type: 'ADDED' | 'MODIFIED' | 'DELETED' }>;

export interface ListWatchHandlers {
  /** A list starts; its items follow through listItem(). A list that fails midway starts again later. */
  beginList(): void;
  listItem(object: Readonly<Record<string, unknown>>): void;
  /** The list is complete (`served` false: 404, counted as empty). */
  endList(resourceVersion: string, served: boolean): void;
  event(e: ObjectEvent): void;
  /** A BOOKMARK moved the resourceVersion on (nothing changed). */
  bookmark?(resourceVersion: string): void;
  /** A problem recovered from by retrying. */
  error(err: Error): void;
}

export interface ListWatchOptions {
  readonly pageSize: number;
  /** Asked of the server per watch; it ends the watch cleanly after this long and we reconnect. */
  readonly watchTimeoutSeconds: number;
  /** Silence after which a watch connection is taken for dead (half-open TCP). */
  readonly idleTimeoutMs: number;
  readonly backoff: Partial<BackoffOptions>;
  readonly random: () => number;
  readonly log?: Logger | undefined;
}

type WatchOutcome = { readonly kind: 'closed' | 'gone'; readonly progress: number; readonly durationMs: number };

/** A watch that ends this fast without delivering anything is treated as a failure (no hot loop). */
const MIN_HEALTHY_WATCH_MS = 1000;

function readListPage(page: unknown, path: string): { items: unknown[]; resourceVersion: string; next: string | undefined } {
  const bad = (what: string): KubeApiError => new KubeApiError(0, 'ListProtocolError', `GET ${path}: ${what}`);
  if (typeof page !== 'object' || page === null) throw bad('the list is not an object');
  const p = page as Record<string, unknown>;
  const meta = (typeof p.metadata === 'object' && p.metadata !== null ? p.metadata : {}) as Record<string, unknown>;
  const items = p.items === null || p.items === undefined ? [] : p.items;
  if (!Array.isArray(items)) throw bad('items is not a list');
  const rv = meta.resourceVersion;
  if (typeof rv !== 'string' || rv === '') throw bad('the list has no metadata.resourceVersion');
  const next = typeof meta.continue === 'string' && meta.continue !== '' ? meta.continue : undefined;
  return { items, resourceVersion: rv, next };
}

export class ListWatch {
  private readonly abort = new AbortController();
  private running: Promise<void> | undefined;
  private rv = '';

  constructor(
    private readonly client: KubeClient,
    /** The collection path, e.g. `/apis/agents.x-k8s.io/v1alpha1/namespaces/team-a/sandboxes`. */
    readonly path: string,
    private readonly handlers: ListWatchHandlers,
    private readonly opts: ListWatchOptions,
  ) {}

  /** The last resourceVersion seen (list, event or bookmark); where a reconnect resumes. */
  get resourceVersion(): string {
    return this.rv;
  }

  start(): void {
    this.running ??= this.run();
  }

  /** Aborts the request in flight and any backoff wait; resolves when the loop has ended. */
  async stop(): Promise<void> {
    this.abort.abort();
    await this.running;
  }

  private async run(): Promise<void> {
    const signal = this.abort.signal;
    // Equal jitter: never less than half the nominal delay, so a flapping API server is not hammered.
    const backoff = new Backoff({ ...KUBE_BACKOFF, ...this.opts.backoff }, this.opts.random);
    let needList = true;
    while (!signal.aborted) {
      try {
        if (needList) {
          if (!(await this.list(signal))) {
            await sleep(backoff.next(), signal);
            continue;
          }
          needList = false;
        }
        const outcome = await this.watch(signal);
        if (outcome.kind === 'gone') {
          this.opts.log?.debug({ path: this.path, resourceVersion: this.rv }, 'watch expired (410): relisting');
          needList = true;
        }
        if (outcome.progress > 0) backoff.reset();
        // A watch that ends (or expires) at once without progress must not turn into a request loop.
        else if (outcome.kind === 'gone' || outcome.durationMs < MIN_HEALTHY_WATCH_MS) await sleep(backoff.next(), signal);
      } catch (err) {
        if (signal.aborted) break;
        this.handlers.error(err instanceof Error ? err : new Error(String(err)));
        const delay = backoff.next();
        this.opts.log?.debug({ path: this.path, resourceVersion: this.rv, delayMs: delay, relist: needList }, 'list/watch failed: retrying');
        await sleep(delay, signal);
      }
    }
  }

  /** Lists every page; false when the resource is not served (404). */
  private async list(signal: AbortSignal): Promise<boolean> {
    let cont: string | undefined;
    let restarts = 0;
    this.handlers.beginList();
    for (;;) {
      let page: unknown;
      try {
        page = await this.client.getJson(this.path, { limit: String(this.opts.pageSize), continue: cont }, signal);
      } catch (err) {
        if (cont === undefined && err instanceof KubeApiError && err.status === 404) {
          this.handlers.error(new KubeApiError(404, 'NotFound', `GET ${this.path}: the resource is not served (is the CRD installed?); counted as empty`, { cause: err }));
          this.handlers.endList('', false);
          return false;
        }
        // The continue token outlived the API server's compaction window: start over from page one.
        if (cont !== undefined && isGone(err) && restarts < 3) {
          restarts++;
          cont = undefined;
          this.handlers.beginList();
          continue;
        }
        throw err;
      }
      const { items, resourceVersion, next } = readListPage(page, this.path);
      for (const item of items) {
        if (typeof item === 'object' && item !== null && !Array.isArray(item)) this.handlers.listItem(item as Record<string, unknown>);
      }
      if (next === undefined) {
        this.rv = resourceVersion;
        this.handlers.endList(resourceVersion, true);
        return true;
      }
      cont = next;
    }
  }

  private async watch(signal: AbortSignal): Promise<WatchOutcome> {
    const started = performance.now();
    const elapsed = (): number => performance.now() - started;
    const query = { watch: '1', resourceVersion: this.rv, allowWatchBookmarks: 'true', timeoutSeconds: String(this.opts.watchTimeoutSeconds) };
    let res;
    try {
      res = await this.client.openStream(this.path, query, signal, this.opts.idleTimeoutMs);
    } catch (err) {
      if (isGone(err)) return { kind: 'gone', progress: 0, durationMs: elapsed() };
      throw err;
    }
    const stream = res;
    return new Promise<WatchOutcome>((resolve, reject) => {
      const splitter = new LineSplitter();
      let progress = 0;
      let settled = false;
      const finish = (outcome: WatchOutcome['kind'] | Error): void => {
        if (settled) return;
        settled = true;
        stream.destroy();
        if (outcome instanceof Error) reject(outcome);
        else resolve({ kind: outcome, progress, durationMs: elapsed() });
      };
      const onLine = (line: string): void => {
        if (settled) return;
        const e = parseWatchEvent(line);
        switch (e.type) {
          case 'BOOKMARK':
            progress++;
            this.rv = e.resourceVersion;
            this.handlers.bookmark?.(e.resourceVersion);
            return;
          case 'ERROR':
            // Servers send code 410 with reason Expired or Gone; either alone is taken as 410.
            if (e.status.code === 410 || e.status.reason === 'Expired' || e.status.reason === 'Gone') finish('gone');
            else finish(new KubeApiError(e.status.code, e.status.reason || 'WatchError', `watch ${this.path}: ERROR event: ${e.status.message}`));
            return;
          default:
            progress++;
            if (e.resourceVersion !== '') this.rv = e.resourceVersion;
            try {
              this.handlers.event(e);
            } catch (err) {
              this.handlers.error(err as Error);
            }
        }
      };
      stream.on('data', (chunk: Buffer) => {
        try {
          splitter.push(chunk, onLine);
        } catch (err) {
          finish(err as Error);
        }
      });
      stream.on('end', () => {
        try {
          splitter.end(onLine);
        } catch (err) {
          finish(err as Error);
          return;
        }
        finish('closed');
      });
      stream.on('error', (err: Error) => finish(err instanceof KubeApiError ? err : new KubeApiError(0, 'WatchDropped', `watch ${this.path}: ${err.message}`, { cause: err })));
      stream.on('close', () => {
        if (!stream.complete) finish(new KubeApiError(0, 'WatchDropped', `watch ${this.path}: the connection dropped mid-stream`));
        else finish('closed');
      });
    });
  }
}

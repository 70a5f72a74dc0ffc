import type { IncomingMessage, ServerResponse } from 'node:http';
import { isDnsLabel } from '../domain/labels.js';
import type { SandboxView, ViewEntry } from '../view/sandbox-view.js';
import { sendError } from './respond.js';
import { sandboxJson } from './sandbox-json.js';

/**
 * `GET /v1/sandboxes/watch`: Server-Sent Events (the WHATWG HTML "server-sent events" format).
 *
 * A new watcher gets `event: reset`, one `event: upsert` per sandbox, then `event: synced` whose `id` is
 * the view's change counter. After that every change is an `upsert` or `delete` event with its counter as
 * `id`. A client that reconnects with `Last-Event-ID` gets just the changes it missed when they are still
 * in the history ring, or a clear `reset` followed by the full state when they are not.
 */

interface Change {
  readonly version: number;
  readonly key: string;
  readonly entry: ViewEntry | undefined;
}

/** One event still to be written; produced lazily so a queued watcher costs a closure, not a JSON string. */
type Pending = () => string | undefined;

interface Client {
  readonly res: ServerResponse;
  readonly namespace: string | null;
  /** The caller's tenancy scope (api-access.ts): changes of namespaces it may not see are never sent. */
  readonly sees: (namespace: string) => boolean;
  /** Events waiting for the socket to drain (undefined while the socket keeps up). */
  queue: Pending[] | undefined;
}

export interface WatchOptions {
  /** Changes kept for Last-Event-ID resumption. Default 10,000. */
  readonly historySize?: number;
  /** Comment line sent to idle watchers so proxies keep the stream open. Default 15 s. */
  readonly heartbeatMs?: number;
  /** How long after the last watcher leaves changes are still kept for its reconnect. Default 5 minutes. */
  readonly historyGraceMs?: number;
  /** Local clock (ms). Default Date.now. */
  readonly now?: () => number;
}

export class SandboxWatch {
  private readonly ring: Change[] = [];
  private readonly clients = new Set<Client>();
  private readonly heartbeat: NodeJS.Timeout;
  private readonly historySize: number;
  private readonly historyGraceMs: number;
  private readonly now: () => number;
  /** Changes are recorded while a watcher is connected and until this time after the last one left. */
  private recordUntil = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly view: SandboxView,
    opts: WatchOptions = {},
  ) {
    this.historySize = opts.historySize ?? 10_000;
    this.historyGraceMs = opts.historyGraceMs ?? 300_000;
    this.now = opts.now ?? Date.now;
    view.onChange((key, entry, version) => {
      // With nobody watching or about to reconnect, keeping changes costs the busiest path (every driver
      // update) an allocation and keeps old entries alive for nothing. A change not kept leaves a gap, so
      // the ring is emptied: it only ever holds an unbroken run of changes, and a reconnect from before
      // the gap gets a reset and the full state instead of a replay that would skip what it missed.
      if (this.clients.size === 0 && this.now() >= this.recordUntil) {
        if (this.ring.length > 0) this.ring.length = 0;
        return;
      }
      this.ring.push({ version, key, entry });
      // Trimmed in batches so a busy view pays O(1) per change, not a shift of the whole ring.
      if (this.ring.length >= 2 * this.historySize) this.ring.splice(0, this.ring.length - this.historySize);
      if (this.clients.size === 0) return;
      for (const c of this.clients) this.send(c, { version, key, entry });
    });
    this.heartbeat = setInterval(() => {
      for (const c of this.clients) if (c.queue === undefined) c.res.write(': ping\n\n');
    }, opts.heartbeatMs ?? 15_000);
    this.heartbeat.unref();
  }

  get watchers(): number {
    return this.clients.size;
  }

  /** Serves one watcher; `sees` is the caller's scope, applied to the full state and every change. */
  serve(req: IncomingMessage, res: ServerResponse, url: URL, sees: (namespace: string) => boolean = () => true): void {
    const namespace = url.searchParams.get('namespace');
    if (namespace !== null && !isDnsLabel(namespace)) return sendError(res, 'invalid_request', 'namespace must be a DNS-1123 label');
    const header = req.headers['last-event-id'];
    const lastHeader = (typeof header === 'string' ? header : undefined) ?? url.searchParams.get('lastEventId') ?? undefined;
    const last = lastHeader === undefined || !/^\d+$/.test(lastHeader) ? undefined : Number(lastHeader);
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive', 'x-accel-buffering': 'no' });
    const client: Client = { res, namespace, sees, queue: undefined };
    this.clients.add(client);
    res.once('close', () => {
      this.clients.delete(client);
      if (this.clients.size === 0) this.recordUntil = this.now() + this.historyGraceMs;
    });
    const first = this.ring[0];
    const current = this.view.version;
    const replayable = last !== undefined && last <= current && (last === current || (first !== undefined && first.version <= last + 1));
    // Replays and full states go through the same backpressure as live changes.
    if (replayable) {
      for (const c of this.ring) if (c.version > last) this.enqueue(client, () => this.format(client, c));
    } else {
      this.enqueue(client, () => 'event: reset\ndata: {}\n\n');
      for (const e of [...this.view.list()]) {
        if ((namespace === null || e.namespace === namespace) && sees(e.namespace)) this.enqueue(client, () => `event: upsert\ndata: ${JSON.stringify(sandboxJson(e, this.view.activity))}\n\n`);
      }
      this.enqueue(client, () => `id: ${current}\nevent: synced\ndata: {"version":${current}}\n\n`);
    }
  }

  /** Ends every stream (shutdown). */
  close(): void {
    clearInterval(this.heartbeat);
    for (const c of this.clients) c.res.end();
    this.clients.clear();
  }

  private send(c: Client, change: Change): void {
    this.enqueue(c, () => this.format(c, change));
  }

  /** The SSE text of a change for this watcher, or undefined when its namespace filter or scope skips it. */
  private format(c: Client, change: Change): string | undefined {
    const slash = change.key.indexOf('/');
    const ns = change.key.slice(0, slash);
    if ((c.namespace !== null && c.namespace !== ns) || !c.sees(ns)) return undefined;
    const data = change.entry !== undefined ? sandboxJson(change.entry, this.view.activity) : { namespace: ns, name: change.key.slice(slash + 1) };
    return `id: ${change.version}\nevent: ${change.entry !== undefined ? 'upsert' : 'delete'}\ndata: ${JSON.stringify(data)}\n\n`;
  }

  /**
   * Writes now while the socket keeps up; once it pushes back, queues until 'drain'. A watcher that falls
   * further behind than the history ring is dropped — it reconnects with Last-Event-ID (or gets a reset).
   */
  private enqueue(c: Client, event: Pending): void {
    if (c.queue !== undefined) {
      c.queue.push(event);
      if (c.queue.length > Math.max(this.historySize, this.view.size + 2)) {
        this.clients.delete(c);
        c.res.destroy();
      }
      return;
    }
    const text = event();
    if (text !== undefined && !c.res.write(text)) {
      c.queue = [];
      c.res.once('drain', () => this.flush(c));
    }
  }

  private flush(c: Client): void {
    const queue = c.queue ?? [];
    c.queue = undefined;
    for (let i = 0; i < queue.length; i++) {
      if (c.res.destroyed) return;
      const text = queue[i]!();
      if (text !== undefined && !c.res.write(text)) {
        c.queue = queue.slice(i + 1);
        c.res.once('drain', () => this.flush(c));
        return;
      }
    }
  }
}

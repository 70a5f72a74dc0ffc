import type { IncomingMessage, ServerResponse } from 'node:http';
import { isDnsLabel } from '../domain/labels.js';
import type { SandboxView, ViewEntry } from '../view/sandbox-view.js';
import { sendError } from './respond.js';
import { sandboxJson } from './sandbox-json.js';
import type { ActivityReadout } from '../domain/sandbox.js';

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
  /** Its SSE text, made the first time a watcher needs it and shared by every watcher after. */
  text: string | undefined;
}

/** The full state still to be written to a new watcher: the view's entries, then `synced`. */
interface Dump {
  readonly entries: Iterator<ViewEntry>;
  readonly version: number;
}

interface Client {
  readonly res: ServerResponse;
  readonly namespace: string | null;
  /** The caller's tenancy scope (api-access.ts): changes of namespaces it may not see are never sent. */
  readonly sees: (namespace: string) => boolean;
  readonly principal: string;
  /** What waits for the socket to drain, in order (undefined while the socket keeps up), and its bytes. */
  queue: (string | Dump)[] | undefined;
  queuedBytes: number;
}

export interface WatchOptions {
  /** Changes kept for Last-Event-ID resumption. Default 10,000. */
  readonly historySize?: number;
  /** Comment line sent to idle watchers so proxies keep the stream open. Default 15 s. */
  readonly heartbeatMs?: number;
  /** How long after the last watcher leaves changes are still kept for its reconnect. Default 5 minutes. */
  readonly historyGraceMs?: number;
  /** Watch streams open at once on this gateway (`--watch-max-total`). Default 1000. */
  readonly maxTotal?: number;
  /** Watch streams one principal may have open (`--watch-max-per-principal`). Default 32. */
  readonly maxPerPrincipal?: number;
  /** Bytes a watcher may be behind (unsent in its socket and queued) before it is dropped (`--watch-max-buffer-bytes`). Default 16 MiB. */
  readonly maxBufferBytes?: number;
  /** Local clock (ms). Default Date.now. */
  readonly now?: () => number;
}

export class SandboxWatch {
  private readonly ring: Change[] = [];
  private readonly clients = new Set<Client>();
  private readonly perPrincipal = new Map<string, number>();
  private readonly heartbeat: NodeJS.Timeout;
  private readonly historySize: number;
  private readonly historyGraceMs: number;
  private readonly maxTotal: number;
  private readonly maxPerPrincipal: number;
  private readonly maxBufferBytes: number;
  private readonly now: () => number;
  /** Changes are recorded while a watcher is connected and until this time after the last one left. */
  private recordUntil = Number.NEGATIVE_INFINITY;
  /** Changes serialized (each once, whatever the number of watchers) and watchers dropped for not reading. */
  serialized = 0;
  dropped = 0;

  constructor(
    private readonly view: SandboxView,
    private readonly activity: ActivityReadout,
    opts: WatchOptions = {},
  ) {
    this.historySize = opts.historySize ?? 10_000;
    this.historyGraceMs = opts.historyGraceMs ?? 300_000;
    this.maxTotal = opts.maxTotal ?? 1000;
    this.maxPerPrincipal = opts.maxPerPrincipal ?? 32;
    this.maxBufferBytes = opts.maxBufferBytes ?? 16 * 1024 * 1024;
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
      const change: Change = { version, key, entry, text: undefined };
      this.ring.push(change);
      // Trimmed in batches so a busy view pays O(1) per change, not a shift of the whole ring.
      if (this.ring.length >= 2 * this.historySize) this.ring.splice(0, this.ring.length - this.historySize);
      for (const c of this.clients) this.sendChange(c, change);
    });
    this.heartbeat = setInterval(() => {
      for (const c of this.clients) if (c.queue === undefined) c.res.write(': ping\n\n');
    }, opts.heartbeatMs ?? 15_000);
    this.heartbeat.unref();
  }

  get watchers(): number {
    return this.clients.size;
  }

  /**
   * Serves one watcher; `sees` is the caller's scope, applied to the full state and every change, and
   * `principal` whom its streams count against (a team, or a source address without a key).
   */
  serve(req: IncomingMessage, res: ServerResponse, url: URL, sees: (namespace: string) => boolean = () => true, principal = req.socket.remoteAddress ?? ''): void {
    const namespace = url.searchParams.get('namespace');
    if (namespace !== null && !isDnsLabel(namespace)) return sendError(res, 'invalid_request', 'namespace must be a DNS-1123 label');
    const open = this.perPrincipal.get(principal) ?? 0;
    if (this.clients.size >= this.maxTotal || open >= this.maxPerPrincipal) {
      const which = open >= this.maxPerPrincipal ? `${this.maxPerPrincipal} for this caller` : `${this.maxTotal} on this gateway`;
      return sendError(res, 'too_many_watches', `Too many watch streams open (${which}); close one or retry later`, { 'retry-after': '5' });
    }
    const header = req.headers['last-event-id'];
    const lastHeader = (typeof header === 'string' ? header : undefined) ?? url.searchParams.get('lastEventId') ?? undefined;
    const last = lastHeader === undefined || !/^\d+$/.test(lastHeader) ? undefined : Number(lastHeader);
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive', 'x-accel-buffering': 'no' });
    const client: Client = { res, namespace, sees, principal, queue: undefined, queuedBytes: 0 };
    this.clients.add(client);
    this.perPrincipal.set(principal, open + 1);
    res.once('close', () => this.leave(client));
    const first = this.ring[0];
    const current = this.view.version;
    const replayable = last !== undefined && last <= current && (last === current || (first !== undefined && first.version <= last + 1));
    // Replays and full states go through the same backpressure as live changes.
    if (replayable) {
      for (const c of this.ring) if (c.version > last) this.sendChange(client, c);
    } else {
      this.send(client, 'event: reset\ndata: {}\n\n');
      this.send(client, { entries: this.view.list(), version: current });
    }
  }

  /** Ends every stream (shutdown). */
  close(): void {
    clearInterval(this.heartbeat);
    for (const c of this.clients) c.res.end();
    this.clients.clear();
    this.perPrincipal.clear();
  }

  private leave(c: Client): void {
    if (!this.clients.delete(c)) return;
    const n = (this.perPrincipal.get(c.principal) ?? 1) - 1;
    if (n === 0) this.perPrincipal.delete(c.principal);
    else this.perPrincipal.set(c.principal, n);
    if (this.clients.size === 0) this.recordUntil = this.now() + this.historyGraceMs;
  }

  private sendChange(c: Client, change: Change): void {
    const slash = change.key.indexOf('/');
    const ns = change.key.slice(0, slash);
    if ((c.namespace !== null && c.namespace !== ns) || !c.sees(ns)) return;
    if (change.text === undefined) {
      const data = change.entry !== undefined ? this.upsertData(change.entry) : JSON.stringify({ namespace: ns, name: change.key.slice(slash + 1) });
      change.text = `id: ${change.version}\nevent: ${change.entry !== undefined ? 'upsert' : 'delete'}\ndata: ${data}\n\n`;
      this.serialized++;
    }
    this.send(c, change.text);
  }

  private upsertData(e: ViewEntry): string {
    return JSON.stringify(sandboxJson(e, this.activity));
  }

  /**
   * Writes now while the socket keeps up; once it pushes back, queues until 'drain' (shared texts: a queued
   * change costs a reference). A watcher behind by more than the bound is dropped — it reconnects with
   * Last-Event-ID and gets what it missed from the history ring, or a reset.
   */
  private send(c: Client, item: string | Dump): void {
    if (c.queue === undefined) {
      if (typeof item === 'string' ? !c.res.write(item) : !this.writeDump(c, item)) {
        c.queue = typeof item === 'string' ? [] : [item];
        c.res.once('drain', () => this.flush(c));
      }
      return;
    }
    c.queue.push(item);
    if (typeof item === 'string') c.queuedBytes += item.length;
    // Behind by more bytes than the bound, or by more changes than the ring replays: reconnecting is cheaper.
    if (c.queuedBytes + c.res.writableLength > this.maxBufferBytes || c.queue.length > this.historySize) {
      this.dropped++;
      this.leave(c);
      c.res.destroy();
    }
  }

  /** Writes a dump's entries until the socket pushes back (false: the dump is not done). */
  private writeDump(c: Client, dump: Dump): boolean {
    for (;;) {
      const next = dump.entries.next();
      if (next.done === true) return c.res.write(`id: ${dump.version}\nevent: synced\ndata: {"version":${dump.version}}\n\n`);
      const e = next.value;
      if ((c.namespace !== null && e.namespace !== c.namespace) || !c.sees(e.namespace)) continue;
      if (!c.res.write(`event: upsert\ndata: ${this.upsertData(e)}\n\n`)) return false;
    }
  }

  private flush(c: Client): void {
    const queue = c.queue ?? [];
    c.queue = undefined;
    c.queuedBytes = 0;
    for (let i = 0; i < queue.length; i++) {
      if (c.res.destroyed) return;
      const item = queue[i]!;
      const more = typeof item === 'string' ? c.res.write(item) : this.writeDump(c, item);
      if (!more) {
        // A dump that pushed back is not done: it stays first in the queue.
        c.queue = typeof item === 'string' ? queue.slice(i + 1) : queue.slice(i);
        for (const q of c.queue) if (typeof q === 'string') c.queuedBytes += q.length;
        c.res.once('drain', () => this.flush(c));
        return;
      }
    }
  }
}

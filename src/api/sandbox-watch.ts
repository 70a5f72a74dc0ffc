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

const MAX_BUFFERED_BYTES = 1 << 20;

interface Change {
  readonly version: number;
  readonly key: string;
  readonly entry: ViewEntry | undefined;
}

interface Client {
  readonly res: ServerResponse;
  readonly namespace: string | null;
}

export class SandboxWatch {
  private readonly ring: Change[] = [];
  private readonly clients = new Set<Client>();
  private readonly heartbeat: NodeJS.Timeout;

  constructor(
    private readonly view: SandboxView,
    private readonly historySize = 10_000,
    heartbeatMs = 15_000,
  ) {
    view.onChange((key, entry, version) => {
      this.ring.push({ version, key, entry });
      // Trimmed in batches so a busy view pays O(1) per change, not a shift of the whole ring.
      if (this.ring.length >= 2 * this.historySize) this.ring.splice(0, this.ring.length - this.historySize);
      if (this.clients.size === 0) return;
      for (const c of this.clients) this.send(c, { version, key, entry });
    });
    this.heartbeat = setInterval(() => {
      for (const c of this.clients) c.res.write(': ping\n\n');
    }, heartbeatMs);
    this.heartbeat.unref();
  }

  get watchers(): number {
    return this.clients.size;
  }

  serve(req: IncomingMessage, res: ServerResponse, url: URL): void {
    const namespace = url.searchParams.get('namespace');
    if (namespace !== null && !isDnsLabel(namespace)) return sendError(res, 'invalid_request', 'namespace must be a DNS-1123 label');
    const header = req.headers['last-event-id'];
    const lastHeader = (typeof header === 'string' ? header : undefined) ?? url.searchParams.get('lastEventId') ?? undefined;
    const last = lastHeader === undefined || !/^\d+$/.test(lastHeader) ? undefined : Number(lastHeader);
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-store', connection: 'keep-alive', 'x-accel-buffering': 'no' });
    const client: Client = { res, namespace };
    const first = this.ring[0];
    const current = this.view.version;
    const replayable = last !== undefined && last <= current && (last === current || (first !== undefined && first.version <= last + 1));
    if (replayable) {
      for (const c of this.ring) if (c.version > last) this.send(client, c);
    } else {
      res.write('event: reset\ndata: {}\n\n');
      for (const e of this.view.list()) if (namespace === null || e.namespace === namespace) res.write(`event: upsert\ndata: ${JSON.stringify(sandboxJson(e))}\n\n`);
      res.write(`id: ${current}\nevent: synced\ndata: {"version":${current}}\n\n`);
    }
    this.clients.add(client);
    res.once('close', () => this.clients.delete(client));
  }

  /** Ends every stream (shutdown). */
  close(): void {
    clearInterval(this.heartbeat);
    for (const c of this.clients) c.res.end();
    this.clients.clear();
  }

  private send(c: Client, change: Change): void {
    if (c.res.writableLength > MAX_BUFFERED_BYTES) {
      // A watcher that does not read: drop it rather than buffer without bound; it resumes with Last-Event-ID.
      this.clients.delete(c);
      c.res.destroy();
      return;
    }
    const slash = change.key.indexOf('/');
    const ns = change.key.slice(0, slash);
    if (c.namespace !== null && c.namespace !== ns) return;
    const data = change.entry !== undefined ? sandboxJson(change.entry) : { namespace: ns, name: change.key.slice(slash + 1) };
    c.res.write(`id: ${change.version}\nevent: ${change.entry !== undefined ? 'upsert' : 'delete'}\ndata: ${JSON.stringify(data)}\n\n`);
  }
}

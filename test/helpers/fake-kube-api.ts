import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseAllDocuments } from 'yaml';

/**
 * A local stand-in for the Kubernetes API server that speaks the real list/watch protocol for custom
 * resources, so the Kubernetes drivers are tested over HTTP the way they run:
 *
 * - `GET /apis/<group>/<version>/[namespaces/<ns>/]<plural>` → a `<Kind>List` with
 *   `metadata.resourceVersion`, paged with `limit` / `continue` over a consistent snapshot;
 * - `…?watch=1&resourceVersion=N&allowWatchBookmarks=true` → newline-delimited JSON WatchEvents
 *   (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR with a Status) with chunked transfer encoding, replaying
 *   history after N first;
 * - 410 Gone for compacted resourceVersions, either as an HTTP 410 Status or as an ERROR event with code
 *   410 (`goneMode`), and for expired continue tokens;
 * - `PATCH` with `application/merge-patch+json` (RFC 7386), recorded for assertions;
 * - connection drops mid-stream, clean watch ends, injected failures, and a bearer-token check.
 *
 * One resourceVersion counter serves every resource, as etcd's revision does.
 */

export interface ResourceRef {
  readonly group: string;
  readonly version: string;
  readonly plural: string;
  readonly kind: string;
}

export const AGENT_SANDBOX: ResourceRef = { group: 'agents.x-k8s.io', version: 'v1alpha1', plural: 'sandboxes', kind: 'Sandbox' };
export const OPENKRUISE_SANDBOX: ResourceRef = { group: 'agents.kruise.io', version: 'v1alpha1', plural: 'sandboxes', kind: 'Sandbox' };

export type KubeObject = Record<string, unknown> & { metadata: Record<string, unknown> };

export interface RecordedRequest {
  readonly method: string;
  readonly path: string;
  readonly query: Readonly<Record<string, string>>;
  readonly authorization: string | undefined;
  readonly contentType: string | undefined;
  readonly body: string;
}

/** The objects of test/fixtures/kubernetes/<file>.yaml (one per YAML document), by metadata.name. */
export function loadKubeFixtures(file: 'agent-sandbox' | 'openkruise'): ReadonlyMap<string, KubeObject> {
  const text = readFileSync(new URL(`../fixtures/kubernetes/${file}.yaml`, import.meta.url), 'utf8');
  const out = new Map<string, KubeObject>();
  for (const doc of parseAllDocuments(text)) {
    const o = doc.toJS() as KubeObject;
    out.set(String(o.metadata.name), o);
  }
  return out;
}

/** A fixture by name, deep-copied (tests may change it). */
export function fixture(all: ReadonlyMap<string, KubeObject>, name: string): KubeObject {
  const o = all.get(name);
  if (o === undefined) throw new Error(`no fixture ${name}`);
  return structuredClone(o);
}

type EventType = 'ADDED' | 'MODIFIED' | 'DELETED';

interface HistoryEntry {
  readonly rv: number;
  readonly key: string;
  readonly namespace: string;
  readonly type: EventType;
  readonly object: KubeObject;
}

interface Watcher {
  readonly key: string;
  readonly namespace: string | undefined;
  readonly bookmarks: boolean;
  readonly res: ServerResponse;
  readonly query: Readonly<Record<string, string>>;
}

type FailureKind = 'list' | 'watch' | 'patch';

function resourceKey(r: { group: string; version: string; plural: string }): string {
  return `${r.group}/${r.version}/${r.plural}`;
}

function statusBody(code: number, reason: string, message: string): string {
  return JSON.stringify({ kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code });
}

function clone<T>(v: T): T {
  return structuredClone(v);
}

/** RFC 7386 JSON merge patch. */
function mergePatch(target: unknown, patch: unknown): unknown {
  if (typeof patch !== 'object' || patch === null || Array.isArray(patch)) return clone(patch);
  const out: Record<string, unknown> = typeof target === 'object' && target !== null && !Array.isArray(target) ? { ...(target as Record<string, unknown>) } : {};
  for (const [k, v] of Object.entries(patch as Record<string, unknown>)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}

export class FakeKubeApi {
  /** Every request received, in order. */
  readonly requests: RecordedRequest[] = [];
  /** `http`: a watch from a compacted resourceVersion gets HTTP 410; `event`: 200 and an ERROR event. */
  goneMode: 'http' | 'event' = 'http';
  /** Write every watch event in two chunks, cut in the middle (tests line reassembly). */
  splitWrites = false;
  /** Watches opened so far (including ones answered 410). */
  watchCount = 0;
  /**
   * While true, changes are kept in history but not streamed to open watches: a watcher that fell
   * behind. compact() then loses them for good, as an API server's compaction does.
   */
  holdEvents = false;
  private rv = 100;
  private compactedRv = 0;
  private uidCounter = 0;
  private snapshotCounter = 0;
  private readonly served = new Map<string, ResourceRef>();
  private readonly objects = new Map<string, Map<string, KubeObject>>();
  private history: HistoryEntry[] = [];
  private readonly watchers = new Set<Watcher>();
  private readonly snapshots = new Map<number, { rv: number; items: KubeObject[] }>();
  private readonly failures: { kind: FailureKind; status: number; times: number; skip: number }[] = [];
  private readonly waiters: { count: number; resolve: () => void }[] = [];
  private readonly idleWaiters: (() => void)[] = [];

  private constructor(
    private readonly server: Server,
    readonly url: string,
    /** When set, requests without `Authorization: Bearer <token>` get 401. */
    readonly token: string | undefined,
  ) {}

  static async start(opts: { token?: string; serve?: readonly ResourceRef[] } = {}): Promise<FakeKubeApi> {
    const holder: { api?: FakeKubeApi } = {};
    const server = createServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (c: string) => (body += c));
      req.on('end', () => holder.api!.handle(req, res, body));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = (server.address() as AddressInfo).port;
    const api = new FakeKubeApi(server, `http://127.0.0.1:${port}`, opts.token);
    holder.api = api;
    for (const r of opts.serve ?? [AGENT_SANDBOX, OPENKRUISE_SANDBOX]) api.serve(r);
    return api;
  }

  /** Installs a resource (its CRD): unserved resources answer 404. */
  serve(r: ResourceRef): void {
    this.served.set(resourceKey(r), r);
    if (!this.objects.has(resourceKey(r))) this.objects.set(resourceKey(r), new Map());
  }

  get resourceVersion(): string {
    return String(this.rv);
  }

  /** Open watch connections. */
  get openWatches(): number {
    return this.watchers.size;
  }

  requestsOf(method: string, predicate: (r: RecordedRequest) => boolean = () => true): RecordedRequest[] {
    return this.requests.filter((r) => r.method === method && predicate(r));
  }

  lists(): RecordedRequest[] {
    return this.requestsOf('GET', (r) => r.query.watch === undefined && !/\/sandboxes\/[^/]+$/.test(r.path));
  }

  watches(): RecordedRequest[] {
    return this.requestsOf('GET', (r) => r.query.watch !== undefined);
  }

  patches(): RecordedRequest[] {
    return this.requestsOf('PATCH');
  }

  /** Resolves when no watch connection is open (after a client stopped). */
  waitForNoWatches(): Promise<void> {
    if (this.watchers.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** Resolves once `count` watches have been opened in total. */
  waitForWatches(count: number): Promise<void> {
    if (this.watchCount >= count) return Promise.resolve();
    return new Promise((resolve) => this.waiters.push({ count, resolve }));
  }

  get(r: ResourceRef, namespace: string, name: string): KubeObject | undefined {
    const o = this.objects.get(resourceKey(r))?.get(`${namespace}/${name}`);
    return o === undefined ? undefined : clone(o);
  }

  /** Creates an object (uid, resourceVersion, generation filled in) and streams ADDED. */
  create(r: ResourceRef, obj: Record<string, unknown>): KubeObject {
    const o = clone(obj) as KubeObject;
    o.apiVersion = `${r.group}/${r.version}`;
    o.kind = r.kind;
    o.metadata = { ...(o.metadata ?? {}) };
    const ns = String(o.metadata.namespace ?? 'default');
    o.metadata.namespace = ns;
    o.metadata.uid ??= `uid-${++this.uidCounter}`;
    o.metadata.generation = 1;
    o.metadata.creationTimestamp ??= '2026-01-01T00:00:00Z';
    this.serve(r);
    const store = this.objects.get(resourceKey(r))!;
    const key = `${ns}/${String(o.metadata.name)}`;
    if (store.has(key)) throw new Error(`${key} exists`);
    this.commit(r, ns, 'ADDED', o);
    store.set(key, o);
    return clone(o);
  }

  /** Changes an object in place and streams MODIFIED (generation grows when spec changed). */
  modify(r: ResourceRef, namespace: string, name: string, mutate: (o: KubeObject) => void): KubeObject {
    const store = this.objects.get(resourceKey(r));
    const key = `${namespace}/${name}`;
    const held = store?.get(key);
    if (store === undefined || held === undefined) throw new Error(`${key} not found`);
    const o = clone(held);
    mutate(o);
    if (JSON.stringify(o.spec) !== JSON.stringify(held.spec)) o.metadata.generation = Number(held.metadata.generation ?? 1) + 1;
    this.commit(r, namespace, 'MODIFIED', o);
    store.set(key, o);
    return clone(o);
  }

  /** Deletes an object and streams DELETED (carrying the deletion's resourceVersion). */
  remove(r: ResourceRef, namespace: string, name: string): void {
    const store = this.objects.get(resourceKey(r));
    const key = `${namespace}/${name}`;
    const held = store?.get(key);
    if (store === undefined || held === undefined) throw new Error(`${key} not found`);
    store.delete(key);
    this.commit(r, namespace, 'DELETED', clone(held));
  }

  /** Sends a BOOKMARK at the current resourceVersion to every watch that allows them. */
  bookmark(): void {
    for (const w of this.watchers) {
      if (!w.bookmarks) continue;
      const r = this.served.get(w.key)!;
      this.write(w, { type: 'BOOKMARK', object: { kind: r.kind, apiVersion: `${r.group}/${r.version}`, metadata: { resourceVersion: String(this.rv) } } });
    }
  }

  /** Forgets history: a watch from before now is answered 410 (per goneMode). */
  compact(): void {
    this.compactedRv = this.rv;
    this.history = [];
  }

  /** Ends every open watch with an ERROR event carrying a 410 Status (what an API server does on compaction). */
  expireWatches(): void {
    this.compact();
    for (const w of [...this.watchers]) {
      this.write(w, { type: 'ERROR', object: JSON.parse(statusBody(410, 'Expired', 'too old resource version')) });
      this.endWatch(w);
    }
  }

  /** Cuts every watch connection mid-stream (no terminating chunk). */
  dropWatches(): void {
    for (const w of [...this.watchers]) {
      this.watchers.delete(w);
      w.res.socket?.destroy();
    }
  }

  /** Ends every watch cleanly, as when timeoutSeconds runs out. */
  endWatches(): void {
    for (const w of [...this.watchers]) this.endWatch(w);
  }

  /** Continue tokens handed out so far stop working (410 Expired). */
  expireContinueTokens(): void {
    this.snapshots.clear();
  }

  /** After `skip` more requests of `kind`, the next `times` get `status` with a Status body. */
  failNext(kind: FailureKind, status: number, times = 1, skip = 0): void {
    this.failures.push({ kind, status, times, skip });
  }

  /** Writes raw text (a malformed line, a hand-made event) to every open watch. */
  writeRaw(text: string): void {
    for (const w of this.watchers) w.res.write(text);
  }

  async close(): Promise<void> {
    for (const w of [...this.watchers]) w.res.destroy();
    this.watchers.clear();
    await new Promise<void>((resolve) => {
      this.server.close(() => resolve());
      this.server.closeAllConnections();
    });
  }

  private commit(r: ResourceRef, namespace: string, type: EventType, o: KubeObject): void {
    this.rv++;
    o.metadata.resourceVersion = String(this.rv);
    const entry: HistoryEntry = { rv: this.rv, key: resourceKey(r), namespace, type, object: clone(o) };
    this.history.push(entry);
    if (this.holdEvents) return;
    for (const w of this.watchers) if (this.matches(w, entry)) this.write(w, { type, object: entry.object });
  }

  private matches(w: Watcher, e: HistoryEntry): boolean {
    return w.key === e.key && (w.namespace === undefined || w.namespace === e.namespace);
  }

  private write(w: Watcher, event: unknown): void {
    const line = JSON.stringify(event) + '\n';
    if (!this.splitWrites) {
      w.res.write(line);
      return;
    }
    const bytes = Buffer.from(line, 'utf8');
    const cut = Math.floor(bytes.length / 2);
    w.res.write(bytes.subarray(0, cut));
    w.res.write(bytes.subarray(cut));
  }

  private endWatch(w: Watcher): void {
    this.watchers.delete(w);
    w.res.end();
  }

  private takeFailure(kind: FailureKind): number | undefined {
    const f = this.failures.find((x) => x.kind === kind && x.times > 0);
    if (f === undefined) return undefined;
    if (f.skip > 0) {
      f.skip--;
      return undefined;
    }
    f.times--;
    return f.status;
  }

  private handle(req: IncomingMessage, res: ServerResponse, body: string): void {
    const url = new URL(req.url ?? '/', 'http://x');
    const query = Object.fromEntries(url.searchParams);
    const rec: RecordedRequest = {
      method: req.method ?? '',
      path: url.pathname,
      query,
      authorization: req.headers.authorization,
      contentType: req.headers['content-type'],
      body,
    };
    this.requests.push(rec);
    const fail = (code: number, reason: string, message: string): void => {
      res.writeHead(code, { 'Content-Type': 'application/json' });
      res.end(statusBody(code, reason, message));
    };
    if (this.token !== undefined && rec.authorization !== `Bearer ${this.token}`) return fail(401, 'Unauthorized', 'Unauthorized');
    const m = /^\/apis\/([^/]+)\/([^/]+)\/(?:namespaces\/([^/]+)\/)?([^/]+)(?:\/([^/]+))?$/.exec(url.pathname);
    const ref = m === null ? undefined : this.served.get(`${m[1]}/${m[2]}/${m[4]}`);
    if (m === null || ref === undefined) return fail(404, 'NotFound', 'the server could not find the requested resource');
    const namespace = m[3] === undefined ? undefined : decodeURIComponent(m[3]);
    const name = m[5] === undefined ? undefined : decodeURIComponent(m[5]);
    const watching = query.watch === '1' || query.watch === 'true';
    const kind: FailureKind = req.method === 'PATCH' ? 'patch' : watching ? 'watch' : 'list';
    const injected = this.takeFailure(kind);
    if (injected !== undefined) return fail(injected, injected === 410 ? 'Expired' : 'InternalError', `injected ${injected}`);
    if (req.method === 'PATCH' && namespace !== undefined && name !== undefined) return this.patch(ref, namespace, name, rec, res, fail);
    if (req.method !== 'GET' || name !== undefined) return fail(405, 'MethodNotAllowed', 'method not allowed');
    if (watching) return this.watch(ref, namespace, query, res, fail);
    return this.list(ref, namespace, query, res, fail);
  }

  private list(r: ResourceRef, namespace: string | undefined, query: Record<string, string>, res: ServerResponse, fail: (c: number, r: string, m: string) => void): void {
    let snap: { rv: number; items: KubeObject[] };
    let offset = 0;
    let id: number;
    if (query.continue !== undefined && query.continue !== '') {
      let token: { id: number; offset: number };
      try {
        token = JSON.parse(Buffer.from(query.continue, 'base64url').toString('utf8')) as { id: number; offset: number };
      } catch {
        return fail(400, 'BadRequest', 'invalid continue token');
      }
      const held = this.snapshots.get(token.id);
      if (held === undefined) return fail(410, 'Expired', 'The provided continue parameter is too old to display a consistent list result.');
      snap = held;
      offset = token.offset;
      id = token.id;
    } else {
      const items = [...this.objects.get(resourceKey(r))!.entries()]
        .filter(([, o]) => namespace === undefined || o.metadata.namespace === namespace)
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
        .map(([, o]) => clone(o));
      snap = { rv: this.rv, items };
      id = ++this.snapshotCounter;
    }
    const limit = query.limit === undefined ? 0 : Number(query.limit);
    const end = limit > 0 ? Math.min(snap.items.length, offset + limit) : snap.items.length;
    const metadata: Record<string, unknown> = { resourceVersion: String(snap.rv) };
    if (end < snap.items.length) {
      this.snapshots.set(id, snap);
      metadata.continue = Buffer.from(JSON.stringify({ id, offset: end })).toString('base64url');
      metadata.remainingItemCount = snap.items.length - end;
    } else {
      this.snapshots.delete(id);
    }
    res.writeHead(200, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify({ kind: `${r.kind}List`, apiVersion: `${r.group}/${r.version}`, metadata, items: snap.items.slice(offset, end) }));
  }

  private watch(r: ResourceRef, namespace: string | undefined, query: Record<string, string>, res: ServerResponse, fail: (c: number, r: string, m: string) => void): void {
    this.watchCount++;
    for (const w of this.waiters.filter((x) => x.count <= this.watchCount)) {
      this.waiters.splice(this.waiters.indexOf(w), 1);
      w.resolve();
    }
    const from = query.resourceVersion === undefined || query.resourceVersion === '' ? this.rv : Number(query.resourceVersion);
    const gone = from < this.compactedRv;
    if (gone && this.goneMode === 'http') return fail(410, 'Expired', `too old resource version: ${from} (${this.compactedRv})`);
    res.writeHead(200, { 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked' });
    res.flushHeaders();
    const w: Watcher = { key: resourceKey(r), namespace, bookmarks: query.allowWatchBookmarks === 'true', res, query };
    if (gone) {
      this.write(w, { type: 'ERROR', object: JSON.parse(statusBody(410, 'Expired', `too old resource version: ${from} (${this.compactedRv})`)) });
      res.end();
      return;
    }
    for (const e of this.history) if (e.rv > from && this.matches(w, e)) this.write(w, { type: e.type, object: e.object });
    this.watchers.add(w);
    res.on('close', () => {
      this.watchers.delete(w);
      if (this.watchers.size === 0) for (const resolve of this.idleWaiters.splice(0)) resolve();
    });
    const timeout = Number(query.timeoutSeconds ?? '0');
    if (timeout > 0) {
      const timer = setTimeout(() => this.watchers.has(w) && this.endWatch(w), timeout * 1000);
      res.on('close', () => clearTimeout(timer));
    }
  }

  private patch(r: ResourceRef, namespace: string, name: string, rec: RecordedRequest, res: ServerResponse, fail: (c: number, r: string, m: string) => void): void {
    if (rec.contentType !== 'application/merge-patch+json') return fail(415, 'UnsupportedMediaType', `unsupported content type ${String(rec.contentType)}`);
    if (this.get(r, namespace, name) === undefined) return fail(404, 'NotFound', `sandboxes "${name}" not found`);
    let patch: unknown;
    try {
      patch = JSON.parse(rec.body);
    } catch {
      return fail(400, 'BadRequest', 'the patch is not JSON');
    }
    const updated = this.modify(r, namespace, name, (o) => {
      const merged = mergePatch(o, patch) as KubeObject;
      for (const k of Object.keys(o)) delete o[k];
      Object.assign(o, merged);
    });
    res.writeHead(200, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify(updated));
  }
}

/**
 * An append-only record that tests await on: `until(pred)` resolves as soon as the record satisfies
 * `pred` (checked on every push), or rejects after `ms` showing what was recorded.
 */
export class Recorder<T> {
  readonly items: T[] = [];
  private readonly waiters = new Set<{ pred: (items: readonly T[]) => boolean; resolve: () => void }>();

  push(item: T): void {
    this.items.push(item);
    for (const w of [...this.waiters]) {
      if (w.pred(this.items)) {
        this.waiters.delete(w);
        w.resolve();
      }
    }
  }

  until(pred: (items: readonly T[]) => boolean, what: string, ms = 5000): Promise<void> {
    if (pred(this.items)) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const w = {
        pred,
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
      };
      const timer = setTimeout(() => {
        this.waiters.delete(w);
        reject(new Error(`timed out waiting for ${what}; recorded: ${JSON.stringify(this.items, null, 1).slice(0, 4000)}`));
      }, ms);
      this.waiters.add(w);
    });
  }
}

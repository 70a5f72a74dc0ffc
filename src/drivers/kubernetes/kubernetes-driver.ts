import type { KubeConfig } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { SandgateError } from '../../domain/errors.js';
import { isDnsLabel } from '../../domain/labels.js';
import { sandboxKey, type ActivityReport, type BackendSnapshot, type SessionModel } from '../../domain/sandbox.js';
import type { Driver, DriverSink } from '../driver.js';
import { mapAgentSandbox } from './agent-sandbox-mapping.js';
import type { BackoffOptions } from '../../lib/backoff.js';
import { KubeApiError, KubeClient, kubeConfigForServer, loadKubeConfig } from './kube-client.js';
import { ListWatch, type ListWatchHandlers, type ObjectEvent } from './list-watch.js';
import { mapOpenKruiseSandbox } from './openkruise-mapping.js';
import { ANNOTATION_LAST_ACTIVITY, asObject, nonEmptyString, type MapOptions } from './sandbox-object.js';

/**
 * The Kubernetes drivers: one per Sandbox kind (agent-sandbox, OpenKruise Agents). Each lists and
 * watches its `sandboxes` resource — per namespace when namespaces are configured, cluster-wide
 * otherwise — and reports mapped snapshots to the gateway: the first complete list of every namespace
 * is one `replace()` (that marks the driver synced), every relist another, and watch events `apply()`.
 * `resume()` merge-patches the object the way each controller expects. docs/kubernetes-driver.md has
 * the mapping tables, the watch behaviour and the RBAC.
 */

export type KubeKind = 'agent-sandbox' | 'openkruise';

export interface KindSpec {
  /** Driver id (`kubernetes/<kind>`). */
  readonly id: string;
  readonly group: string;
  readonly version: string;
  readonly plural: string;
  readonly map: (obj: unknown, opts: MapOptions) => BackendSnapshot | undefined;
  /** The RFC 7386 merge patch that resumes a paused sandbox. */
  readonly resumePatch: unknown;
  /** The RFC 7386 merge patch that pauses a running sandbox (idle pause). */
  readonly pausePatch: unknown;
}

export const KUBE_KINDS: Readonly<Record<KubeKind, KindSpec>> = {
  'agent-sandbox': {
    id: 'kubernetes/agent-sandbox',
    group: 'agents.x-k8s.io',
    version: 'v1alpha1',
    plural: 'sandboxes',
    map: mapAgentSandbox,
    // spec.replicas: 0 suspends (pod deleted), 1 runs.
    resumePatch: { spec: { replicas: 1 } },
    pausePatch: { spec: { replicas: 0 } },
  },
  openkruise: {
    id: 'kubernetes/openkruise',
    group: 'agents.kruise.io',
    version: 'v1alpha1',
    plural: 'sandboxes',
    map: mapOpenKruiseSandbox,
    // SandboxSpec.Paused (`json:"paused,omitempty"`).
    resumePatch: { spec: { paused: false } },
    pausePatch: { spec: { paused: true } },
  },
};

export function isKubeKind(s: string): s is KubeKind {
  return Object.hasOwn(KUBE_KINDS, s);
}

export interface KubernetesDriverOptions {
  readonly kind: KubeKind;
  /** A loaded kubeconfig, or just an API server URL (tests, `kubectl proxy`). */
  readonly kubeConfig: KubeConfig | { readonly server: string; readonly token?: string };
  /** Namespaces to list and watch; empty = the whole cluster. */
  readonly namespaces?: readonly string[];
  readonly defaultSessionModel?: SessionModel;
  readonly log?: Logger;
  readonly backoff?: Partial<BackoffOptions>;
  /** Randomness for the backoff jitter (tests pass a constant). */
  readonly random?: () => number;
  /** `limit` of each list page. */
  readonly pageSize?: number;
  /** `timeoutSeconds` of each watch: the server ends it cleanly and the driver reconnects. */
  readonly watchTimeoutSeconds?: number;
  /** Silence after which a watch connection is taken for dead; default watchTimeoutSeconds + 60 s. */
  readonly idleTimeoutMs?: number;
  /** Bound on a list page or a resume patch. */
  readonly requestTimeoutMs?: number;
}

/** One list/watch: a namespace, or the whole cluster. */
interface Scope {
  readonly path: string;
  /** What the last list plus the events since say, by `namespace/name`. */
  store: Map<string, BackendSnapshot>;
  /** A list in progress. */
  pending: Map<string, BackendSnapshot> | undefined;
  listed: boolean;
}

const MAX_REMEMBERED_WARNINGS = 1000;
/** Activity patches in flight at once (a report round of many sandboxes does not open as many connections). */
const REPORT_CONCURRENCY = 8;

export class KubernetesDriver implements Driver {
  readonly id: string;
  readonly kind: KubeKind;
  readonly client: KubeClient;
  private readonly spec: KindSpec;
  private readonly namespaces: readonly string[];
  private readonly mapOptions: MapOptions;
  private readonly log: Logger | undefined;
  private readonly scopes: Scope[] = [];
  private readonly watches: ListWatch[] = [];
  private sink: DriverSink | undefined;
  private synced = false;
  private stopped = false;
  private readonly warned = new Set<string>();

  constructor(private readonly opts: KubernetesDriverOptions) {
    this.kind = opts.kind;
    this.spec = KUBE_KINDS[opts.kind];
    this.id = this.spec.id;
    const kc = 'server' in opts.kubeConfig ? kubeConfigForServer(opts.kubeConfig.server, opts.kubeConfig.token) : opts.kubeConfig;
    this.client = new KubeClient(kc, opts.requestTimeoutMs === undefined ? {} : { requestTimeoutMs: opts.requestTimeoutMs });
    this.namespaces = [...new Set((opts.namespaces ?? []).filter((n) => n !== ''))];
    this.log = opts.log?.child({ part: 'drivers', driver: this.id });
    this.mapOptions = { defaultSessionModel: opts.defaultSessionModel ?? 'required', onWarning: (m) => this.warn(m) };
  }

  /** `/apis/<group>/<version>/[namespaces/<ns>/]sandboxes[/<name>]`. */
  path(namespace?: string, name?: string): string {
    const base = `/apis/${this.spec.group}/${this.spec.version}`;
    const ns = namespace === undefined ? '' : `/namespaces/${encodeURIComponent(namespace)}`;
    return `${base}${ns}/${this.spec.plural}${name === undefined ? '' : `/${encodeURIComponent(name)}`}`;
  }

  /** Starts listing and watching; resolves at once (the first replace() marks the driver synced). */
  async start(sink: DriverSink): Promise<void> {
    if (this.sink !== undefined || this.stopped) return;
    this.sink = sink;
    const watchTimeoutSeconds = this.opts.watchTimeoutSeconds ?? 300;
    const lwOpts = {
      pageSize: this.opts.pageSize ?? 500,
      watchTimeoutSeconds,
      idleTimeoutMs: this.opts.idleTimeoutMs ?? (watchTimeoutSeconds + 60) * 1000,
      backoff: this.opts.backoff ?? {},
      random: this.opts.random ?? Math.random,
      log: this.log,
    };
    const targets = this.namespaces.length === 0 ? [undefined] : this.namespaces;
    for (const ns of targets) {
      const scope: Scope = { path: this.path(ns), store: new Map(), pending: undefined, listed: false };
      this.scopes.push(scope);
      this.watches.push(new ListWatch(this.client, scope.path, this.handlersFor(scope), lwOpts));
    }
    this.log?.info({ server: this.client.server, namespaces: this.namespaces.length === 0 ? 'all' : this.namespaces }, 'watching sandboxes');
    for (const w of this.watches) w.start();
  }

  /** Aborts every list, watch and backoff timer; resolves when all have ended. */
  async stop(): Promise<void> {
    this.stopped = true;
    await Promise.all(this.watches.map((w) => w.stop()));
  }

  /** Resumes a paused sandbox: agent-sandbox `spec.replicas: 1`, OpenKruise `spec.paused: false`. */
  async resume(namespace: string, name: string): Promise<void> {
    if (namespace === '' || name === '') throw new KubeApiError(400, 'Invalid', 'resume needs a namespace and a name');
    await this.client.mergePatch(this.path(namespace, name), this.spec.resumePatch);
    this.log?.info({ namespace, name }, 'resume requested');
  }

  /** Pauses a running sandbox (idle pause): agent-sandbox `spec.replicas: 0`, OpenKruise `spec.paused: true`. */
  async pause(namespace: string, name: string): Promise<void> {
    if (namespace === '' || name === '') throw new KubeApiError(400, 'Invalid', 'pause needs a namespace and a name');
    await this.client.mergePatch(this.path(namespace, name), this.spec.pausePatch);
    this.log?.info({ namespace, name }, 'pause requested');
  }

  /**
   * Writes each sandbox's last activity into its `sandgate.dev/last-activity` annotation (RFC 3339), one
   * merge patch per sandbox, a few at a time. A sandbox deleted meanwhile (404) is skipped; any other
   * failure rejects the round once all have been tried (the gateway retries those sandboxes).
   */
  async reportActivity(reports: readonly ActivityReport[]): Promise<void> {
    const queue = [...reports];
    const failures: unknown[] = [];
    const worker = async (): Promise<void> => {
      for (let r = queue.shift(); r !== undefined; r = queue.shift()) {
        const patch = { metadata: { annotations: { [ANNOTATION_LAST_ACTIVITY]: new Date(r.at).toISOString() } } };
        await this.client.mergePatch(this.path(r.namespace, r.name), patch).catch((err: unknown) => {
          if (!(err instanceof KubeApiError && err.status === 404)) failures.push(err);
        });
      }
    };
    await Promise.all(Array.from({ length: Math.min(REPORT_CONCURRENCY, queue.length) }, worker));
    if (failures.length > 0) throw failures[0];
  }

  private handlersFor(scope: Scope): ListWatchHandlers {
    return {
      beginList: () => {
        scope.pending = new Map();
      },
      listItem: (obj) => {
        const snap = this.map(obj);
        if (snap !== undefined) scope.pending?.set(sandboxKey(snap.namespace, snap.name), snap);
      },
      endList: (resourceVersion, served) => {
        scope.store = scope.pending ?? new Map();
        scope.pending = undefined;
        scope.listed = true;
        this.log?.debug({ path: scope.path, resourceVersion, served, sandboxes: scope.store.size }, 'listed');
        this.publish();
      },
      event: (e) => this.onEvent(scope, e),
      error: (err) => {
        if (!this.stopped) this.sink?.error(err);
      },
    };
  }

  /** A full list of everything known, once every scope has listed (again after each relist). */
  private publish(): void {
    if (this.stopped || this.sink === undefined) return;
    if (!this.scopes.every((s) => s.listed)) return;
    const all: BackendSnapshot[] = [];
    for (const s of this.scopes) for (const snap of s.store.values()) all.push(snap);
    this.synced = true;
    this.sink.replace(all);
  }

  private onEvent(scope: Scope, e: ObjectEvent): void {
    if (this.stopped) return;
    if (e.type === 'DELETED') {
      const meta = asObject(e.object.metadata);
      const namespace = nonEmptyString(meta?.namespace);
      const name = nonEmptyString(meta?.name);
      const uid = nonEmptyString(meta?.uid);
      if (namespace === undefined || name === undefined || uid === undefined) {
        this.refused(e.object);
        return;
      }
      const key = sandboxKey(namespace, name);
      if (scope.store.get(key)?.uid === uid) scope.store.delete(key);
      if (this.synced) this.sink?.apply({ type: 'delete', namespace, name, uid, resourceVersion: e.resourceVersion });
      return;
    }
    const snap = this.map(e.object);
    if (snap === undefined) return;
    scope.store.set(sandboxKey(snap.namespace, snap.name), snap);
    if (this.synced) this.sink?.apply({ type: 'upsert', snapshot: snap });
  }

  private map(obj: unknown): BackendSnapshot | undefined {
    const snap = this.spec.map(obj, this.mapOptions);
    if (snap === undefined) this.refused(obj);
    return snap;
  }

  private refused(obj: unknown): void {
    const meta = asObject(asObject(obj)?.metadata);
    const what = `${String(meta?.namespace ?? '?')}/${String(meta?.name ?? '?')}`;
    this.sink?.error(new KubeApiError(0, 'InvalidObject', `${this.id}: ignored object ${what} without metadata.name, namespace and uid`));
  }

  /** Annotation problems, logged once per distinct message (they repeat on every update of the object). */
  private warn(message: string): void {
    if (this.warned.has(message)) return;
    if (this.warned.size >= MAX_REMEMBERED_WARNINGS) this.warned.clear();
    this.warned.add(message);
    this.log?.warn(message);
  }
}

/** What the gateway's configuration gives the factory (`--kubernetes`, `--kubeconfig`, `--kube-*`). */
export interface KubernetesDriversConfig {
  /** kubeconfig file; empty/absent = KUBECONFIG, else in-cluster, else ~/.kube/config. */
  readonly kubeconfig?: string;
  /** `agent-sandbox`, `openkruise`. */
  readonly kinds: readonly string[];
  /** Empty = all namespaces. */
  readonly namespaces: readonly string[];
  /** `required` | `none`: the session model of sandboxes without a sandgate.dev/supervisor annotation. */
  readonly defaultSessionModel: string;
  readonly log?: Logger;
  readonly backoff?: Partial<BackoffOptions>;
}

/** One driver per kind, sharing one kubeconfig. Throws SandgateError `config_invalid`. */
export function createKubernetesDrivers(c: KubernetesDriversConfig): KubernetesDriver[] {
  const kinds = [...new Set(c.kinds)];
  if (kinds.length === 0) throw new SandgateError('config_invalid', `kube-kinds is empty; use one or more of ${Object.keys(KUBE_KINDS).join(', ')}`);
  for (const k of kinds) {
    if (!isKubeKind(k)) throw new SandgateError('config_invalid', `kube-kinds: unknown kind ${JSON.stringify(k)}; use ${Object.keys(KUBE_KINDS).join(', ')}`);
  }
  for (const ns of c.namespaces) {
    if (!isDnsLabel(ns)) throw new SandgateError('config_invalid', `kube-namespaces: ${JSON.stringify(ns)} is not a namespace name (DNS-1123 label)`);
  }
  if (c.defaultSessionModel !== 'required' && c.defaultSessionModel !== 'none') {
    throw new SandgateError('config_invalid', `kube-session-model must be required or none, not ${JSON.stringify(c.defaultSessionModel)}`);
  }
  const kubeConfig = loadKubeConfig(c.kubeconfig);
  return (kinds as KubeKind[]).map(
    (kind) =>
      new KubernetesDriver({
        kind,
        kubeConfig,
        namespaces: c.namespaces,
        defaultSessionModel: c.defaultSessionModel as SessionModel,
        ...(c.log === undefined ? {} : { log: c.log }),
        ...(c.backoff === undefined ? {} : { backoff: c.backoff }),
      }),
  );
}

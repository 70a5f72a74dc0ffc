import { readFile } from 'node:fs/promises';
import { watchFile, type FileWatch } from '../../lib/file-watch.js';
import { isIP } from 'node:net';
import { isDeepStrictEqual } from 'node:util';
import { parse as parseYaml } from 'yaml';
import { SandgateError } from '../../domain/errors.js';
import { parseSandboxAccess, withPolicyPublicPorts, type SandboxAccess } from '../../domain/access-policy.js';
import { flat } from '../../domain/flat-string.js';
import { isDnsLabel } from '../../domain/labels.js';
import { parseDuration } from '../../domain/duration.js';
import { sandboxKey, type BackendSnapshot, type BackendState, type Condition, type Endpoint } from '../../domain/sandbox.js';
import type { Driver, DriverSink } from '../driver.js';

/**
 * The file driver: static sandboxes from a YAML or JSON file, for local runs, demos and tests. The file
 * is re-read when it changes; a bad file is reported and the last good set kept.
 *
 *   sandboxes:
 *     - namespace: team-a
 *       name: web
 *       id: sbx-123            # optional opaque id for E2B-style hosts
 *       address: 127.0.0.2     # where the sandbox listens; absent = relay only (no inbound network)
 *       ports: [8000, {port: 50051, protocol: h2c}]  # optional allow-list; absent = any port
 *                              # protocol: http (HTTP/1.1, the default) | h2c (HTTP/2 prior knowledge, gRPC)
 *                              #   | tcp (raw TCP, through tunnels only: docs/tunnels.md)
 *       publicPorts: [8000]    # optional: ports anyone may open, no credential needed (each one of `ports`, if set)
 *       access: {ports: {9000: [{jwt: {issuer: https://k8s.example}}]}, default: [keys]}  # optional (docs/identity.md)
 *       state: ready           # starting | ready | paused | failed | deleting
 *       supervisor: none       # required (default) | none
 *       accessToken: s3cret    # optional traffic token requests must present; `derived` = HMAC(secret, id)
 *       envdAccessToken: t0k   # optional: the in-sandbox daemon's token (E2B X-Access-Token), checked if presented
 *       resume: on-traffic     # optional: resume when traffic arrives while paused | manual
 *       idleTimeout: 30m       # optional: pause after this long without traffic (0 = never; overrides --idle-timeout)
 *       wakeTimeout: 20s       # optional: how long a request that wakes it waits (overrides --readiness-wait-ms)
 *
 * pause() and resume() (idle pause and auto-resume) change the state the driver reports, in its own
 * memory: the file is the operator's and is never written. An edit of that sandbox's entry in the file
 * replaces the driver's state with the file's again.
 */

const STATES: Readonly<Record<string, BackendState>> = {
  starting: 'starting',
  ready: 'ready',
  paused: 'paused',
  failed: 'failed',
  deleting: 'deleting',
};

const READY_BY_STATE: Readonly<Record<BackendState, Omit<Condition, 'type'>>> = {
  starting: { status: 'False', reason: 'Starting', message: 'The sandbox is starting' },
  ready: { status: 'True', reason: 'DependenciesReady', message: '' },
  paused: { status: 'False', reason: 'SandboxPaused', message: 'The sandbox is paused' },
  failed: { status: 'False', reason: 'Failed', message: 'The sandbox has failed' },
  deleting: { status: 'False', reason: 'Deleting', message: 'The sandbox is being deleted' },
};

const KEYS = new Set(['namespace', 'name', 'id', 'ids', 'address', 'ports', 'publicPorts', 'access', 'state', 'supervisor', 'reason', 'message', 'instanceId', 'shutdownTime', 'accessToken', 'envdAccessToken', 'resume', 'idleTimeout', 'wakeTimeout']);

/** A parsed entry, before it gets a uid and a resourceVersion. */
export type FileSandbox = Omit<BackendSnapshot, 'uid' | 'resourceVersion'>;

function fail(message: string): SandgateError {
  return new SandgateError('sandboxes_file_invalid', message);
}

function isPort(p: unknown): p is number {
  return Number.isInteger(p) && (p as number) >= 1 && (p as number) <= 65535;
}

/** `ports`: each a port number, or `{port, protocol}` with protocol `http` (the default), `h2c` or `tcp`. */
function parsePorts(raw: unknown, at: string): { ports: number[] | undefined; h2cPorts: number[] | undefined; tcpPorts: number[] | undefined } {
  if (raw === undefined) return { ports: undefined, h2cPorts: undefined, tcpPorts: undefined };
  if (!Array.isArray(raw)) throw fail(`${at}.ports must be a list of port numbers 1-65535 or {port, protocol} mappings`);
  const ports: number[] = [];
  const h2cPorts: number[] = [];
  const tcpPorts: number[] = [];
  raw.forEach((p: unknown, i) => {
    const where = `${at}.ports[${i}]`;
    if (typeof p === 'object' && p !== null && !Array.isArray(p)) {
      const m = p as Record<string, unknown>;
      for (const k of Object.keys(m)) if (k !== 'port' && k !== 'protocol') throw fail(`${where}: unknown key ${JSON.stringify(k)}; allowed: port, protocol`);
      if (!isPort(m.port)) throw fail(`${where}.port must be a port number 1-65535`);
      const protocol = m.protocol ?? 'http';
      if (protocol !== 'http' && protocol !== 'h2c' && protocol !== 'tcp') throw fail(`${where}.protocol must be http, h2c or tcp`);
      ports.push(m.port);
      if (protocol === 'h2c') h2cPorts.push(m.port);
      if (protocol === 'tcp') tcpPorts.push(m.port);
    } else if (isPort(p)) {
      ports.push(p);
    } else {
      throw fail(`${where} must be a port number 1-65535 or a {port, protocol} mapping`);
    }
  });
  const count = (list: number[], p: number): number => list.filter((x) => x === p).length;
  for (const declared of [h2cPorts, tcpPorts]) for (const p of declared) if (count(ports, p) !== count(declared, p)) throw fail(`${at}.ports lists port ${p} with two protocols`);
  return { ports, h2cPorts: h2cPorts.length === 0 ? undefined : h2cPorts, tcpPorts: tcpPorts.length === 0 ? undefined : tcpPorts };
}

function parseEntry(raw: unknown, at: string): FileSandbox {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw fail(`${at} must be a mapping`);
  const o = raw as Record<string, unknown>;
  for (const k of Object.keys(o)) if (!KEYS.has(k)) throw fail(`${at}: unknown key ${JSON.stringify(k)}; allowed: ${[...KEYS].join(', ')}`);
  const str = (k: string, required: boolean): string | undefined => {
    const v = o[k];
    if (v === undefined || v === null) {
      if (required) throw fail(`${at}.${k} is required`);
      return undefined;
    }
    if (typeof v !== 'string') throw fail(`${at}.${k} must be a string`);
    return v;
  };
  const namespace = str('namespace', true)!;
  const name = str('name', true)!;
  if (!isDnsLabel(namespace)) throw fail(`${at}.namespace ${JSON.stringify(namespace)} must be a DNS-1123 label`);
  if (!isDnsLabel(name)) throw fail(`${at}.name ${JSON.stringify(name)} must be a DNS-1123 label`);
  const ids: string[] = [];
  const id = str('id', false);
  if (id !== undefined) ids.push(id);
  if (o.ids !== undefined) {
    if (!Array.isArray(o.ids) || !o.ids.every((x) => typeof x === 'string')) throw fail(`${at}.ids must be a list of strings`);
    ids.push(...(o.ids as string[]));
  }
  for (const i of ids) if (!isDnsLabel(i)) throw fail(`${at}: id ${JSON.stringify(i)} must be lower-case letters, digits and '-' (at most 63)`);
  const address = str('address', false);
  let endpoint: Endpoint = { kind: 'relay' };
  if (address !== undefined) {
    if (isIP(address) === 0) throw fail(`${at}.address ${JSON.stringify(address)} must be an IP address`);
    endpoint = { kind: 'address', addresses: [address] };
  }
  const { ports, h2cPorts, tcpPorts } = parsePorts(o.ports, at);
  let publicPorts: number[] | undefined;
  if (o.publicPorts !== undefined) {
    if (!Array.isArray(o.publicPorts) || !o.publicPorts.every((p) => Number.isInteger(p) && (p as number) >= 1 && (p as number) <= 65535)) {
      throw fail(`${at}.publicPorts must be a list of port numbers 1-65535`);
    }
    publicPorts = [...new Set(o.publicPorts as number[])];
  }
  const access = o.access === undefined ? undefined : parseAccess(o.access, `${at}.access`);
  publicPorts = withPolicyPublicPorts(publicPorts, access);
  const outside = ports === undefined || publicPorts === undefined ? undefined : publicPorts.find((p) => !ports.includes(p));
  if (outside !== undefined) throw fail(o.publicPorts !== undefined && (o.publicPorts as unknown[]).includes(outside) ? `${at}.publicPorts lists port ${outside}, which is not in ports` : `${at}.access makes port ${outside} public, which is not in ports`);
  const stateText = str('state', false) ?? 'ready';
  const state = STATES[stateText];
  if (state === undefined) throw fail(`${at}.state must be one of ${Object.keys(STATES).join(', ')}`);
  const supervisor = str('supervisor', false) ?? 'required';
  if (supervisor !== 'required' && supervisor !== 'none') throw fail(`${at}.supervisor must be required or none`);
  const base = READY_BY_STATE[state];
  const ready: Condition = { type: 'Ready', ...base, reason: str('reason', false) ?? base.reason, message: str('message', false) ?? base.message };
  let shutdownTime: number | undefined;
  const st = str('shutdownTime', false);
  if (st !== undefined) {
    shutdownTime = Date.parse(st);
    if (Number.isNaN(shutdownTime)) throw fail(`${at}.shutdownTime must be an RFC 3339 time`);
  }
  const token = str('accessToken', false);
  if (token !== undefined && token.length === 0) throw fail(`${at}.accessToken must not be empty`);
  const envdToken = str('envdAccessToken', false);
  if (envdToken !== undefined && envdToken.length === 0) throw fail(`${at}.envdAccessToken must not be empty`);
  const resume = str('resume', false);
  if (resume !== undefined && resume !== 'on-traffic' && resume !== 'manual') throw fail(`${at}.resume must be on-traffic or manual`);
  const duration = (k: string): number | undefined => {
    const v = o[k];
    if (v === undefined || v === null) return undefined;
    const ms = typeof v === 'number' || typeof v === 'string' ? parseDuration(String(v)) : `${at}.${k} must be a duration`;
    if (typeof ms === 'string') throw fail(`${at}.${k}: ${ms}`);
    return ms;
  };
  return {
    namespace,
    name,
    accessToken: token === 'derived' ? { derived: true } : token,
    envdAccessToken: envdToken,
    resumeOnTraffic: resume === undefined ? undefined : resume === 'on-traffic',
    idleTimeoutMs: duration('idleTimeout'),
    wakeTimeoutMs: duration('wakeTimeout'),
    instanceId: str('instanceId', false) ?? flat(sandboxKey(namespace, name)),
    ids,
    state,
    conditions: [ready],
    endpoint,
    sessionModel: supervisor,
    ports,
    h2cPorts,
    tcpPorts,
    publicPorts,
    access,
    shutdownTime,
  };
}

function parseAccess(raw: unknown, at: string): SandboxAccess {
  try {
    return parseSandboxAccess(raw, at);
  } catch (err) {
    throw fail((err as Error).message);
  }
}

/**
 * The snapshot of a parsed entry: one object literal naming every field (the compiler checks none is left
 * out), not `{ ...s, uid, resourceVersion }`. V8 (Node 20) gives nearly every object such a spread makes a
 * hidden class of its own: a map, a descriptor array and a property array per sandbox, about 500 bytes and
 * three more objects for every full GC to mark. Built this way they all share one.
 */
function withIdentity(s: FileSandbox, uid: string, resourceVersion: string): BackendSnapshot {
  return {
    namespace: s.namespace,
    name: s.name,
    uid,
    resourceVersion,
    instanceId: s.instanceId,
    ids: s.ids,
    createdAt: s.createdAt,
    state: s.state,
    conditions: s.conditions,
    endpoint: s.endpoint,
    sessionModel: s.sessionModel,
    ports: s.ports,
    h2cPorts: s.h2cPorts,
    tcpPorts: s.tcpPorts,
    publicPorts: s.publicPorts,
    access: s.access,
    shutdownTime: s.shutdownTime,
    accessToken: s.accessToken,
    envdAccessToken: s.envdAccessToken,
    resumeOnTraffic: s.resumeOnTraffic,
    idleTimeoutMs: s.idleTimeoutMs,
    wakeTimeoutMs: s.wakeTimeoutMs,
    revision: s.revision,
  } satisfies Record<keyof BackendSnapshot, unknown>;
}

/** True when a parsed entry says of its sandbox all that `held` (its snapshot from an earlier load) says. */
function saysTheSame(s: FileSandbox, held: BackendSnapshot): boolean {
  for (const k of Object.keys(s) as (keyof FileSandbox)[]) if (!isDeepStrictEqual(s[k], held[k])) return false;
  return true;
}

/** Parses the text of a sandboxes file. Throws SandgateError `sandboxes_file_invalid` naming the bad entry. */
export function parseSandboxesFile(text: string, path = 'sandboxes file'): FileSandbox[] {
  let doc: unknown;
  try {
    doc = path.endsWith('.json') ? JSON.parse(text) : parseYaml(text);
  } catch (err) {
    throw new SandgateError('sandboxes_file_invalid', `${path} does not parse: ${(err as Error).message}`, { cause: err });
  }
  if (typeof doc !== 'object' || doc === null || !Array.isArray((doc as { sandboxes?: unknown }).sandboxes)) {
    throw fail(`${path} must have a top-level "sandboxes" list`);
  }
  const extra = Object.keys(doc).filter((k) => k !== 'sandboxes');
  if (extra.length > 0) throw fail(`${path}: unknown top-level key ${JSON.stringify(extra[0])}`);
  const out = (doc as { sandboxes: unknown[] }).sandboxes.map((e, i) => parseEntry(e, `sandboxes[${i}]`));
  const seen = new Set<string>();
  const ids = new Set<string>();
  for (const s of out) {
    const key = sandboxKey(s.namespace, s.name);
    if (seen.has(key)) throw fail(`${path}: sandbox ${key} is listed twice`);
    seen.add(key);
    for (const id of s.ids) {
      if (ids.has(id)) throw fail(`${path}: id ${id} is used twice`);
      ids.add(id);
    }
  }
  return out;
}

export class FileDriver implements Driver {
  readonly id = 'file';
  private sink: DriverSink | undefined;
  private watcher: FileWatch | undefined;
  /** The snapshots of the last good file, by key. */
  private held = new Map<string, BackendSnapshot>();
  /** Sandboxes paused or resumed through the driver since their entry last changed in the file: the state reported instead. */
  private readonly states = new Map<string, 'ready' | 'paused'>();
  private generation = 0;
  private uidCounter = 0;
  private reloading: Promise<void> = Promise.resolve();

  constructor(readonly path: string) {}

  async start(sink: DriverSink): Promise<void> {
    this.sink = sink;
    // Watched before the first read: a change between the two is then seen, never lost.
    this.watcher = watchFile(this.path, () => void this.reload(), (err) => sink.error(err));
    await this.reload();
  }

  async stop(): Promise<void> {
    this.watcher?.close();
    this.watcher = undefined;
    await this.reloading;
  }

  /** Re-reads the file now (also on SIGHUP). A bad file is reported and changes nothing. */
  reload(): Promise<void> {
    this.reloading = this.reloading.then(() => this.load());
    return this.reloading;
  }

  private async load(): Promise<void> {
    const sink = this.sink;
    if (sink === undefined) return;
    let parsed: FileSandbox[];
    try {
      parsed = parseSandboxesFile(await readFile(this.path, 'utf8'), this.path);
    } catch (err) {
      sink.error(err instanceof SandgateError ? err : new SandgateError('sandboxes_file_invalid', `cannot read ${this.path}: ${(err as Error).message}`, { cause: err }));
      // A first load that fails still counts as synced (with nothing): the gateway answers 404, not 503 forever.
      if (this.generation === 0) {
        this.generation++;
        sink.replace([]);
      }
      return;
    }
    const version = String(++this.generation);
    const next = new Map<string, BackendSnapshot>();
    for (const s of parsed) {
      const key = flat(sandboxKey(s.namespace, s.name));
      const before = this.held.get(key);
      if (before !== undefined && saysTheSame(s, before)) {
        next.set(key, before);
        continue;
      }
      const uid = before?.uid ?? flat(`file-${process.pid}-${++this.uidCounter}`);
      next.set(key, withIdentity(s, uid, version));
    }
    for (const key of this.states.keys()) if (next.get(key) !== this.held.get(key)) this.states.delete(key);
    this.held = next;
    sink.replace([...next.values()].map((h) => this.withState(h)));
  }

  /** Pauses a sandbox (idle pause): reported paused from now on, until resumed or its entry changes. */
  pause(namespace: string, name: string): Promise<void> {
    return this.setState(namespace, name, 'paused');
  }

  /** Resumes a sandbox (auto-resume): reported ready from now on. */
  resume(namespace: string, name: string): Promise<void> {
    return this.setState(namespace, name, 'ready');
  }

  private setState(namespace: string, name: string, state: 'ready' | 'paused'): Promise<void> {
    const done = this.reloading.then(() => {
      const key = sandboxKey(namespace, name);
      const held = this.held.get(key);
      if (held === undefined) throw new SandgateError('sandbox_not_found', `No sandbox ${key} in ${this.path}`);
      this.states.set(key, state);
      this.sink?.apply({ type: 'upsert', snapshot: this.withState(held) });
    });
    this.reloading = done.catch(() => undefined);
    return done;
  }

  /** `held` in the state pause()/resume() gave it, with a version after every earlier one. */
  private withState(held: BackendSnapshot): BackendSnapshot {
    const state = this.states.get(sandboxKey(held.namespace, held.name));
    if (state === undefined) return held;
    const ready: Condition = { type: 'Ready', ...READY_BY_STATE[state] };
    return { ...held, state, conditions: [ready], resourceVersion: String(++this.generation) };
  }
}

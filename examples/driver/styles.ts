import type { BackendSnapshot, BackendState, Condition, ConditionStatus, Endpoint, SessionModel } from '../../src/domain/sandbox.js';

/**
 * Four backends, each with its own native record and its own mapping to a BackendSnapshot. Each mapping
 * says only what its backend says — backend state and conditions — and never decides the public phase:
 * "running", "healthy", "Ready=True" all become backend `ready`, and the gateway alone decides whether
 * that is public Ready (it also needs a live supervisor session). docs/driver-contract.md has the tables.
 *
 * The records are trimmed-down shapes of what each backend's API returns (Docker's and Podman's container
 * inspect, a Firecracker/cloud-hypervisor-like VM manager, an agent-sandbox-like Sandbox resource).
 */

export type Style = 'docker' | 'podman' | 'vm' | 'kubernetes';
export const STYLES: readonly Style[] = ['docker', 'podman', 'vm', 'kubernetes'];

/** sandgate's own prefix for labels and annotations, the one the Kubernetes driver reads. */
const PREFIX = 'sandgate.dev/';
/** The old prefix: still read when the new name is absent, with one deprecation warning per process. */
const DEPRECATED_PREFIX = 'sandgate.io/';

/** Labels (Docker, Podman) and annotations (Kubernetes) by which a sandbox says how it is routed. */
export const LABEL_NAMESPACE = `${PREFIX}namespace`;
export const LABEL_NAME = `${PREFIX}name`;
export const LABEL_ID = `${PREFIX}sandbox-id`;
/** `none`: the sandbox runs no supervisor. Anything else (or absent): it does. */
export const LABEL_SUPERVISOR = `${PREFIX}supervisor`;
/** Comma-separated port allow-list. */
export const LABEL_PORTS = `${PREFIX}ports`;
/** `50051=h2c,22=tcp,8000=http`: ports that speak h2c (HTTP/2 with prior knowledge, e.g. gRPC) or raw TCP (tunnels only); the rest speak HTTP/1.1. */
export const LABEL_PORT_PROTOCOLS = `${PREFIX}port-protocols`;
/** RFC 3339 expiry (Docker and Podman have no native one). */
export const LABEL_SHUTDOWN_TIME = `${PREFIX}shutdown-time`;

let warnedDeprecatedPrefix = false;

/** The value of `key` (a sandgate.dev/ name), else of its deprecated sandgate.io/ spelling. */
function label(labels: Record<string, string> | undefined, key: string): string | undefined {
  const value = labels?.[key];
  if (value !== undefined) return value;
  const old = DEPRECATED_PREFIX + key.slice(PREFIX.length);
  const oldValue = labels?.[old];
  if (oldValue !== undefined && !warnedDeprecatedPrefix) {
    warnedDeprecatedPrefix = true;
    console.warn(`deprecated label prefix: ${old} is read as ${key}; rename ${DEPRECATED_PREFIX}* labels and annotations to ${PREFIX}*`);
  }
  return oldValue;
}

/** `docker container inspect`, trimmed. */
export interface DockerContainer {
  Id: string;
  /** `/<name>`, as Docker reports it. */
  Name: string;
  Config: { Labels: Record<string, string> };
  State: {
    Status: 'created' | 'running' | 'paused' | 'restarting' | 'removing' | 'exited' | 'dead';
    ExitCode: number;
    Error: string;
    /** Changes on every start: with Id it names the running instance. */
    StartedAt: string;
    /** Present when the image defines a HEALTHCHECK. */
    Health?: { Status: 'starting' | 'healthy' | 'unhealthy' } | undefined;
  };
  NetworkSettings: { IPAddress: string };
}

/** `podman container inspect` (libpod), trimmed. */
export interface PodmanContainer {
  Id: string;
  /** Without Docker's leading slash. */
  Name: string;
  Config: { Labels: Record<string, string> };
  State: {
    Status: 'configured' | 'created' | 'running' | 'paused' | 'stopping' | 'stopped' | 'exited' | 'removing' | 'unknown';
    ExitCode: number;
    OOMKilled: boolean;
    StartedAt: string;
    Healthcheck?: { Status: 'starting' | 'healthy' | 'unhealthy' } | undefined;
  };
  NetworkSettings: { IPAddress: string };
}

/** A VM manager's record of one microVM (Firecracker / cloud-hypervisor-like). */
export interface VmRecord {
  vm_id: string;
  /** A new boot id on every boot. */
  boot_id: string;
  state: 'Not started' | 'Running' | 'Paused' | 'Shutdown' | 'Crashed';
  /** The manager is tearing the VM down. */
  destroying: boolean;
  /** The in-guest agent's readiness; null until it has reported at all. */
  guest_agent: { ready: boolean } | null;
  /** null: no inbound network (traffic rides the supervisor session). */
  network: { tap_ip: string } | null;
  metadata: { namespace: string; name: string; sandbox_id?: string; supervisor?: 'required' | 'none'; ports?: number[] };
  /** RFC 3339. */
  expires_at?: string | undefined;
}

export interface KubeCondition {
  type: string;
  status: ConditionStatus;
  reason?: string;
  message?: string;
  lastTransitionTime?: string;
}

/** An agent-sandbox-like `Sandbox` custom resource, trimmed. */
export interface KubeSandbox {
  metadata: {
    namespace: string;
    name: string;
    uid: string;
    deletionTimestamp?: string | undefined;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
  };
  spec: { replicas?: number; shutdownTime?: string | undefined };
  status: {
    conditions?: KubeCondition[];
    podIPs?: string[];
    serviceFQDN?: string;
    /** The example's stand-in for the pod's uid, which a real driver reads from the pod. */
    podUID?: string;
    /** Template revision wanted and running (OpenKruise-like in-place update). */
    updateRevision?: string;
    currentRevision?: string;
  };
}

export interface StyleRecords {
  docker: DockerContainer;
  podman: PodmanContainer;
  vm: VmRecord;
  kubernetes: KubeSandbox;
}

export interface StyleMapping<R> {
  /** The backend's record as a snapshot: backend state and conditions, never a public phase. */
  toSnapshot(record: R, resourceVersion: string): BackendSnapshot;
  /** The record after the backend resumed it; undefined when it was not paused (nothing to do). */
  resume(record: R): R | undefined;
}

function ready(status: ConditionStatus, reason: string, message = ''): Condition {
  return { type: 'Ready', status, reason, message };
}

function ports(text: string | undefined): number[] | undefined {
  if (text === undefined || text === '') return undefined;
  return text.split(',').map((p) => {
    const n = Number(p.trim());
    if (!Number.isInteger(n) || n < 1 || n > 65535) throw new Error(`bad port ${JSON.stringify(p)} in ${LABEL_PORTS}`);
    return n;
  });
}

/** The ports `text` declares `want` (`h2c` or `tcp`). */
function portsSpeaking(text: string | undefined, want: 'h2c' | 'tcp'): number[] | undefined {
  if (text === undefined || text === '') return undefined;
  const out: number[] = [];
  for (const part of text.split(',')) {
    const [port, protocol] = part.trim().split('=');
    const n = Number(port);
    if (!Number.isInteger(n) || n < 1 || n > 65535 || (protocol !== 'h2c' && protocol !== 'http' && protocol !== 'tcp')) throw new Error(`bad entry ${JSON.stringify(part)} in ${LABEL_PORT_PROTOCOLS}`);
    if (protocol === want) out.push(n);
  }
  return out.length === 0 ? undefined : out;
}

function time(text: string | undefined): number | undefined {
  if (text === undefined || text === '') return undefined;
  const ms = Date.parse(text);
  if (Number.isNaN(ms)) throw new Error(`bad time ${JSON.stringify(text)}`);
  return ms;
}

function sessionModel(value: string | undefined): SessionModel {
  return value === 'none' ? 'none' : 'required';
}

function addresses(ip: string): Endpoint {
  return { kind: 'address', addresses: ip === '' ? [] : [ip] };
}

/** The parts of a snapshot that Docker and Podman spell the same way (labels, IP). */
function containerSnapshot(
  c: { Id: string; Name: string; Config: { Labels: Record<string, string> }; State: { StartedAt: string }; NetworkSettings: { IPAddress: string } },
  resourceVersion: string,
  state: BackendState,
  readyCondition: Condition,
): BackendSnapshot {
  const l = c.Config.Labels;
  const id = label(l, LABEL_ID);
  return {
    namespace: label(l, LABEL_NAMESPACE) ?? 'default',
    name: label(l, LABEL_NAME) ?? c.Name.replace(/^\//, ''),
    uid: c.Id,
    resourceVersion,
    instanceId: `${c.Id}@${c.State.StartedAt}`,
    ids: id === undefined ? [] : [id],
    state,
    conditions: [readyCondition],
    endpoint: addresses(c.NetworkSettings.IPAddress),
    sessionModel: sessionModel(label(l, LABEL_SUPERVISOR)),
    ports: ports(label(l, LABEL_PORTS)),
    h2cPorts: portsSpeaking(label(l, LABEL_PORT_PROTOCOLS), 'h2c'),
    tcpPorts: portsSpeaking(label(l, LABEL_PORT_PROTOCOLS), 'tcp'),
    shutdownTime: time(label(l, LABEL_SHUTDOWN_TIME)),
  };
}

type Health = 'starting' | 'healthy' | 'unhealthy' | undefined;

/** A running container's health check, shared by Docker and Podman. Unhealthy is not terminal: it may recover. */
function runningState(health: Health): [BackendState, Condition] {
  if (health === 'starting') return ['starting', ready('False', 'HealthcheckStarting', 'Health check has not passed yet')];
  if (health === 'unhealthy') return ['starting', ready('False', 'ContainerUnhealthy', 'Health check is failing')];
  return ['ready', ready('True', 'ContainerRunning')];
}

export const docker: StyleMapping<DockerContainer> = {
  toSnapshot(c, rv) {
    const exit = `exit code ${c.State.ExitCode}${c.State.Error === '' ? '' : ': ' + c.State.Error}`;
    const [state, cond]: [BackendState, Condition] = (() => {
      switch (c.State.Status) {
        case 'created':
          return ['starting', ready('False', 'ContainerCreated')];
        case 'restarting':
          return ['starting', ready('False', 'ContainerStarting', 'Restarting')];
        case 'running':
          return runningState(c.State.Health?.Status);
        case 'paused':
          return ['paused', ready('False', 'SandboxPaused')];
        case 'removing':
          return ['deleting', ready('False', 'ContainerRemoving')];
        case 'exited':
          return ['failed', ready('False', 'ContainerExited', exit)];
        case 'dead':
          return ['failed', ready('False', 'ContainerDead', exit)];
      }
    })();
    return containerSnapshot(c, rv, state, cond);
  },
  resume: (c) => (c.State.Status === 'paused' ? { ...c, State: { ...c.State, Status: 'running' } } : undefined),
};

export const podman: StyleMapping<PodmanContainer> = {
  toSnapshot(c, rv) {
    const exit = `exit code ${c.State.ExitCode}${c.State.OOMKilled ? ' (OOM killed)' : ''}`;
    const [state, cond]: [BackendState, Condition] = (() => {
      switch (c.State.Status) {
        case 'configured':
          return ['starting', ready('False', 'ContainerConfigured')];
        case 'created':
          return ['starting', ready('False', 'ContainerCreated')];
        case 'running':
          return runningState(c.State.Healthcheck?.Status);
        case 'paused':
          return ['paused', ready('False', 'SandboxPaused')];
        case 'removing':
          return ['deleting', ready('False', 'ContainerRemoving')];
        // Stopped and exited containers come back only by a new start (a new instance): terminal.
        case 'stopping':
          return ['failed', ready('False', 'ContainerStopping', exit)];
        case 'stopped':
          return ['failed', ready('False', 'ContainerStopped', exit)];
        case 'exited':
          return ['failed', ready('False', 'ContainerExited', exit)];
        case 'unknown':
          return ['starting', ready('Unknown', 'ContainerStateUnknown', 'Podman reports the state as unknown')];
      }
    })();
    return containerSnapshot(c, rv, state, cond);
  },
  resume: (c) => (c.State.Status === 'paused' ? { ...c, State: { ...c.State, Status: 'running' } } : undefined),
};

export const vm: StyleMapping<VmRecord> = {
  toSnapshot(v, rv) {
    const [state, cond]: [BackendState, Condition] = (() => {
      if (v.destroying) return ['deleting', ready('False', 'VmDestroying')];
      switch (v.state) {
        case 'Not started':
          return ['starting', ready('False', 'VmBooting')];
        case 'Paused':
          return ['paused', ready('False', 'SandboxPaused')];
        case 'Shutdown':
          return ['failed', ready('False', 'VmShutdown', 'The guest shut down')];
        case 'Crashed':
          return ['failed', ready('False', 'VmCrashed', 'The VMM reports a crash')];
        case 'Running':
          if (v.guest_agent === null) return ['starting', ready('Unknown', 'GuestAgentUnknown', 'The guest agent has not reported')];
          if (!v.guest_agent.ready) return ['starting', ready('False', 'GuestAgentNotReady')];
          return ['ready', ready('True', 'GuestAgentReady')];
      }
    })();
    const m = v.metadata;
    return {
      namespace: m.namespace,
      name: m.name,
      uid: v.vm_id,
      resourceVersion: rv,
      instanceId: v.boot_id,
      ids: m.sandbox_id === undefined ? [] : [m.sandbox_id],
      state,
      conditions: [cond],
      endpoint: v.network === null ? { kind: 'relay' } : addresses(v.network.tap_ip),
      sessionModel: m.supervisor ?? 'required',
      ports: m.ports,
      shutdownTime: time(v.expires_at),
    };
  },
  resume: (v) => (v.state === 'Paused' ? { ...v, state: 'Running' } : undefined),
};

/** Ready=False reasons of agent-sandbox / OpenKruise that mean "not yet", not "failed". */
const KUBE_TRANSIENT = new Set(['DependenciesNotReady', 'ReconcilerError', 'Starting', 'InplaceUpdating', 'Upgrading', 'PodNotReady']);

export const kubernetes: StyleMapping<KubeSandbox> = {
  toSnapshot(s, rv) {
    const conds: Condition[] = (s.status.conditions ?? []).map((c) => ({
      type: c.type,
      status: c.status,
      reason: c.reason ?? '',
      message: c.message ?? '',
      lastTransitionTime: c.lastTransitionTime,
    }));
    let r = conds.find((c) => c.type === 'Ready');
    if (r === undefined) {
      r = ready('Unknown', 'NoStatus', 'The controller has not reported yet');
      conds.unshift(r);
    }
    let state: BackendState;
    if (s.metadata.deletionTimestamp !== undefined) state = 'deleting';
    else if (s.spec.replicas === 0 || (r.status === 'False' && r.reason === 'SandboxSuspended')) state = 'paused';
    else if (r.status === 'True') state = 'ready';
    else if (r.status === 'Unknown' || KUBE_TRANSIENT.has(r.reason)) state = 'starting';
    // PodFailed, PodSucceeded, SandboxExpired and anything unrecognised: the controller gave up.
    else state = 'failed';
    const a = s.metadata.annotations;
    const id = label(s.metadata.labels, LABEL_ID);
    const ips = s.status.podIPs ?? [];
    const { updateRevision: desired, currentRevision: current } = s.status;
    return {
      namespace: s.metadata.namespace,
      name: s.metadata.name,
      uid: s.metadata.uid,
      resourceVersion: rv,
      instanceId: s.status.podUID ?? '',
      ids: id === undefined ? [] : [id],
      state,
      conditions: conds,
      endpoint: ips.length > 0 ? { kind: 'address', addresses: ips } : s.status.serviceFQDN ? { kind: 'service', fqdn: s.status.serviceFQDN } : addresses(''),
      sessionModel: sessionModel(label(a, LABEL_SUPERVISOR)),
      ports: ports(label(a, LABEL_PORTS)),
      h2cPorts: portsSpeaking(label(a, LABEL_PORT_PROTOCOLS), 'h2c'),
      tcpPorts: portsSpeaking(label(a, LABEL_PORT_PROTOCOLS), 'tcp'),
      shutdownTime: time(s.spec.shutdownTime),
      revision: desired !== undefined && current !== undefined ? { desired, current } : undefined,
    };
  },
  resume(s) {
    if (s.spec.replicas !== 0) return undefined;
    // What the controller does next: scale up and report the pod as not ready yet.
    const others = (s.status.conditions ?? []).filter((c) => c.type !== 'Ready');
    return {
      ...s,
      spec: { ...s.spec, replicas: 1 },
      status: { ...s.status, conditions: [{ type: 'Ready', status: 'False', reason: 'DependenciesNotReady', message: 'Resuming' }, ...others] },
    };
  },
};

export const STYLE_MAPPINGS: { readonly [S in Style]: StyleMapping<StyleRecords[S]> } = { docker, podman, vm, kubernetes };

import type { BackendSnapshot, BackendState, Condition, Endpoint } from '../../domain/sandbox.js';
// Nearly the same helper imports as openkruise-mapping.ts: see the note there.
import {
  addressEndpoint,
  asObject,
  findCondition,
  NO_ENDPOINT,
  NO_IDS,
  nonEmptyString,
  READY_UNKNOWN,
  readAnnotations,
  readConditions,
  readIdentity,
  readTime,
  snapshotOf,
  type MapOptions,
} from './sandbox-object.js';

/**
 * agent-sandbox (`agents.x-k8s.io/v1alpha1` Sandbox, kubernetes-sigs/agent-sandbox) → backend state.
 * docs/kubernetes-driver.md has the table. The controller's Ready condition is authoritative: it reports
 * DependenciesReady when pod and service are up, DependenciesNotReady while they come up, ReconcilerError
 * on a failed reconcile (retried, so transient), SandboxSuspended when spec.replicas is 0, PodFailed /
 * PodSucceeded when the pod ended, and SandboxExpired past spec.shutdownTime with shutdownPolicy Retain.
 * A `Suspended` condition may linger after a resume; it is passed through but never decides the state.
 */

/** Condition types kept for compose() and operators; others (and their messages) are not retained. */
const KEEP: ReadonlySet<string> = new Set(['Ready', 'Suspended', 'PodResizePending', 'PodResizeInProgress', 'PodResizingInProgress']);

/** Ready=False reasons that a running controller moves past by itself (REFERENCE §1, plus the gateway's own). */
export const TRANSIENT_READY_REASONS: ReadonlySet<string> = new Set([
  'ReconcilerError',
  'DependenciesNotReady',
  'SupervisorNotConnected',
  'Starting',
  'ContainerStarting',
  'ContainerCreated',
  'HealthcheckStarting',
  'InspectFailed',
  'PodReady',
  'InplaceUpdating',
  'Upgrading',
]);

export const REASON_SUSPENDED = 'SandboxSuspended';
export const REASON_EXPIRED = 'SandboxExpired';

function stateOf(deleting: boolean, replicas: number | undefined, ready: Condition | undefined): BackendState {
  if (deleting) return 'deleting';
  // The pod and service are gone for good unless shutdownTime moves; compose() reports it as expired.
  if (ready?.status === 'False' && ready.reason === REASON_EXPIRED) return 'deleting';
  if (replicas === 0) return 'paused';
  if (ready === undefined || ready.status === 'Unknown') return 'starting';
  if (ready.status === 'True') return 'ready';
  // replicas back at 1 with the reason not yet updated: a resume in progress.
  if (ready.reason === REASON_SUSPENDED) return replicas === undefined ? 'paused' : 'starting';
  return TRANSIENT_READY_REASONS.has(ready.reason) ? 'starting' : 'failed';
}

function endpointOf(status: Readonly<Record<string, unknown>> | undefined): Endpoint {
  const ips = status?.podIPs;
  const byAddress = Array.isArray(ips) ? addressEndpoint(ips) : undefined;
  if (byAddress !== undefined) return byAddress;
  const fqdn = nonEmptyString(status?.serviceFQDN);
  return fqdn === undefined ? NO_ENDPOINT : { kind: 'service', fqdn };
}

/**
 * Maps one agent-sandbox Sandbox object. Pure. Undefined for an object without metadata.name,
 * metadata.namespace or metadata.uid (refused: it cannot be keyed or fenced).
 */
export function mapAgentSandbox(obj: unknown, opts: MapOptions): BackendSnapshot | undefined {
  const id = readIdentity(obj);
  if (id === undefined) return undefined;
  const o = asObject(obj)!;
  const spec = asObject(o.spec);
  const status = asObject(o.status);
  const conditions = readConditions(status, KEEP);
  const ready = findCondition(conditions, 'Ready');
  const replicas = typeof spec?.replicas === 'number' ? spec.replicas : undefined;
  const state = stateOf(id.deleting, replicas, ready);
  if (ready === undefined) conditions.unshift(READY_UNKNOWN);
  const endpoint = endpointOf(status);
  const ann = readAnnotations(id, opts);
  // No pod uid in this CRD: the incarnation, the spec generation (suspend/resume, template changes) and
  // the pod's address together change whenever the pod is replaced.
  const ip = endpoint.kind === 'address' ? (endpoint.addresses[0] ?? '') : '';
  return snapshotOf(id, ann, {
    instanceId: `${id.uid}/${id.generation}/${ip}`,
    ids: ann.id === undefined ? NO_IDS : [ann.id],
    state,
    conditions,
    endpoint,
    shutdownTime: readTime(spec?.shutdownTime),
  });
}

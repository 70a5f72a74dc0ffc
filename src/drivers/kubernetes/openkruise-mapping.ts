import type { BackendSnapshot, BackendState, Condition, Endpoint } from '../../domain/sandbox.js';
// Nearly the same helper imports as agent-sandbox-mapping.ts: both read through
// sandbox-object.ts, but the two CRDs' fields and conditions differ, so each mapping stays its own function.
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
  readMessage,
  readTime,
  share,
  snapshotOf,
  type Json,
  type MapOptions,
} from './sandbox-object.js';

/**
 * OpenKruise Agents (`agents.kruise.io/v1alpha1` Sandbox) → backend state. docs/kubernetes-driver.md has
 * the table. status.phase carries the lifecycle (Pending, Running, Paused, Resuming, Upgrading, Succeeded,
 * Failed, Recycling, Terminating); the Ready condition carries readiness, and is False with reason
 * PodReady, InplaceUpdating or Upgrading while an in-place update or upgrade runs — compose() turns those
 * into Updating, so they map to `starting` here, never to `failed`. A failed in-place *resize* (the
 * InplaceUpdate condition with reason Failed, e.g. an infeasible CPU resize) leaves the pod running on
 * its old resources: it is passed through and changes nothing.
 */

/** Condition types kept for compose() and operators; probe conditions (`agents.kruise.io/<probe>`) are not. */
const KEEP: ReadonlySet<string> = new Set([
  'Ready',
  'InPlaceUpdateReady',
  'InplaceUpdate',
  'Upgrading',
  'SandboxPaused',
  'SandboxResumed',
  'PodResizePending',
  'PodResizeInProgress',
  'PodResizingInProgress',
]);

/** Ready=False reasons that mean the pod cannot start: terminal for this instance. */
const FAILED_READY_REASONS: ReadonlySet<string> = new Set(['StartContainerFailed', 'PodCreateFailed']);

export const LABEL_SANDBOX_ID = 'agents.kruise.io/sandbox-id';
/** The pod label holding the revision of the template the pod runs (in status.podInfo.labels when copied there). */
export const LABEL_POD_TEMPLATE_HASH = 'pod-template-hash';

function stateOf(deleting: boolean, phase: string | undefined, paused: boolean, conditions: readonly Condition[]): BackendState {
  if (deleting || phase === 'Terminating' || phase === 'Recycling') return 'deleting';
  const ready = findCondition(conditions, 'Ready');
  const upgrading = findCondition(conditions, 'Upgrading');
  if (phase === 'Failed' || phase === 'Succeeded') return 'failed';
  if (ready?.status === 'False' && FAILED_READY_REASONS.has(ready.reason)) return 'failed';
  // PreUpgradeFailed, CheckpointFailed, UpgradePodFailed, PostUpgradeFailed: the upgrade stopped and
  // needs an operator (OpenKruise Agents v0.3.0).
  if (upgrading !== undefined && upgrading.reason.endsWith('Failed')) return 'failed';
  if (paused) return 'paused';
  // Phase Paused without spec.paused: a resume was asked for and the controller has not started it yet.
  if (phase === 'Paused' || phase === 'Resuming') return 'starting';
  if (ready?.status === 'True') return 'ready';
  return 'starting';
}

function endpointOf(status: Json | undefined, podInfo: Json | undefined): Endpoint {
  return addressEndpoint([podInfo?.podIP, status?.sandboxIp]) ?? NO_ENDPOINT;
}

/**
 * Maps one OpenKruise Agents Sandbox object. Pure. Undefined for an object without metadata.name,
 * metadata.namespace or metadata.uid (refused: it cannot be keyed or fenced).
 */
export function mapOpenKruiseSandbox(obj: unknown, opts: MapOptions): BackendSnapshot | undefined {
  const id = readIdentity(obj);
  if (id === undefined) return undefined;
  const o = asObject(obj)!;
  const spec = asObject(o.spec);
  const status = asObject(o.status);
  const podInfo = asObject(status?.podInfo);
  const phase = nonEmptyString(status?.phase);
  const conditions = readConditions(status, KEEP);
  const state = stateOf(id.deleting, phase, spec?.paused === true, conditions);
  if (findCondition(conditions, 'Ready') === undefined) {
    // No Ready yet: with a phase the controller has spoken (Pending…); without one nothing is known.
    conditions.unshift(
      phase === undefined
        ? READY_UNKNOWN
        : { type: 'Ready', status: 'False', reason: share(phase), message: readMessage(status?.message) },
    );
  }
  const endpoint = endpointOf(status, podInfo);
  const ann = readAnnotations(id, opts);
  const ids: string[] = [];
  const sandboxId = nonEmptyString(id.labels?.[LABEL_SANDBOX_ID]);
  if (sandboxId !== undefined) ids.push(sandboxId);
  if (ann.id !== undefined && !ids.includes(ann.id)) ids.push(ann.id);
  const desired = nonEmptyString(status?.updateRevision) ?? nonEmptyString(status?.revision);
  const current = nonEmptyString(asObject(podInfo?.labels)?.[LABEL_POD_TEMPLATE_HASH]);
  const podUid = nonEmptyString(podInfo?.podUID);
  const ip = endpoint.kind === 'address' ? (endpoint.addresses[0] ?? '') : '';
  return snapshotOf(id, ann, {
    // The pod's uid changes when the pod is recreated (resume, Recreate upgrade); the generation when the
    // spec changes (pause/resume, an in-place update): either is a lifecycle change that clears a sticky Error.
    instanceId: podUid !== undefined ? `${podUid}/${id.generation}` : `${id.uid}/${id.generation}/${ip}`,
    ids: ids.length === 0 ? NO_IDS : ids,
    state,
    conditions,
    endpoint,
    shutdownTime: readTime(spec?.shutdownTime),
    // Revisions repeat across every sandbox of a template: one copy each.
    revision: desired !== undefined && current !== undefined ? { desired: share(desired), current: share(current) } : undefined,
  });
}

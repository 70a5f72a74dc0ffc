import type { BackendSnapshot, Condition, Presence, PublicPhase, PublicStatus } from './sandbox.js';

/**
 * The composition of the public phase: `compose(backend, presence, now, prior)`.
 *
 * Invariant: public `Ready` ⇔ the backend is ready ∧ (the sandbox needs no supervisor ∨ a supervisor
 * session is live somewhere in the cluster). Drivers never decide the public phase; this function does,
 * the same way for every driver. The rules are tried in the order of RULES and each has a name that the
 * table-driven tests and docs/architecture.md use.
 */

export const READY = 'Ready';
/** Reasons for the Ready condition that the gateway itself sets. */
export const REASON_DEPENDENCIES_READY = 'DependenciesReady';
export const REASON_SUPERVISOR_NOT_CONNECTED = 'SupervisorNotConnected';
export const REASON_SANDBOX_EXPIRED = 'SandboxExpired';

/** Ready=False reasons with which OpenKruise reports an in-place update or upgrade in progress. */
const UPDATING_READY_REASONS: ReadonlySet<string> = new Set(['InplaceUpdating', 'Upgrading']);

export type RuleName =
  | 'deleting'
  | 'expired'
  | 'failed'
  | 'error-sticky'
  | 'paused'
  | 'updating'
  | 'starting'
  | 'unknown'
  | 'ready-no-session-needed'
  | 'ready-with-session'
  | 'supervisor-not-connected';

/** Every rule, in the order compose() applies them, with the phase each yields. */
// One row per rule, the same shape on purpose: the table is the documentation.
export const RULES: readonly { readonly name: RuleName; readonly phase: PublicPhase; readonly when: string }[] = [
  { name: 'deleting', phase: 'Deleting', when: 'the backend reports deletion' },
  { name: 'expired', phase: 'Deleting', when: 'shutdownTime has passed, or Ready=False reason SandboxExpired' },
  { name: 'failed', phase: 'Error', when: 'the backend reports a terminal failure' },
  { name: 'error-sticky', phase: 'Error', when: 'an earlier failure of the same uid and instanceId (no lifecycle change since)' },
  { name: 'paused', phase: 'Paused', when: 'the backend reports paused' },
  {
    name: 'updating',
    phase: 'Updating',
    when: 'Ready is not True and an in-place update is in progress: Ready=False reason InplaceUpdating/Upgrading, InplaceUpdate reason InplaceUpdating, InPlaceUpdateReady=False, or revision ≠ pod revision',
  },
  { name: 'unknown', phase: 'Unknown', when: 'the backend is starting and its Ready condition is Unknown (no status yet)' },
  { name: 'starting', phase: 'Provisioning', when: 'the backend is starting' },
  { name: 'ready-no-session-needed', phase: 'Ready', when: 'the backend is ready and the sandbox runs no supervisor (session model none)' },
  { name: 'ready-with-session', phase: 'Ready', when: 'the backend is ready and a supervisor session is live in the cluster' },
  {
    name: 'supervisor-not-connected',
    phase: 'Provisioning',
    when: 'the backend is ready but no supervisor session is live (Ready=False reason SupervisorNotConnected)',
  },
];

export function findCondition(conditions: readonly Condition[], type: string): Condition | undefined {
  for (const c of conditions) if (c.type === type) return c;
  return undefined;
}

function isUpdating(b: BackendSnapshot, ready: Condition | undefined): Condition | undefined {
  // A backend that says Ready=True is serving: an in-place CPU resize (OpenKruise marks it InplaceUpdating
  // too) or an update rejected for in-place never changes routing.
  if (ready !== undefined && ready.status === 'True') return undefined;
  if (ready !== undefined && ready.status === 'False' && UPDATING_READY_REASONS.has(ready.reason)) return ready;
  const inplace = findCondition(b.conditions, 'InplaceUpdate');
  if (inplace !== undefined && inplace.reason === 'InplaceUpdating' && inplace.status !== 'True') return inplace;
  const ipur = findCondition(b.conditions, 'InPlaceUpdateReady');
  if (ipur !== undefined && ipur.status === 'False') {
    return { ...ipur, reason: ipur.reason === '' ? 'InplaceUpdating' : ipur.reason };
  }
  if (b.revision !== undefined && b.revision.desired !== b.revision.current) {
    return { type: 'InplaceUpdate', status: 'False', reason: 'InplaceUpdating', message: `revision ${b.revision.current} → ${b.revision.desired}` };
  }
  return undefined;
}

function readyCondition(status: 'True' | 'False' | 'Unknown', reason: string, message: string): Condition {
  return { type: READY, status, reason, message };
}

/** The backend's conditions other than Ready, passed through for operators (resize, rejected updates…); undefined when there are none. */
function passthrough(b: BackendSnapshot): Condition[] | undefined {
  let out: Condition[] | undefined;
  for (const c of b.conditions) if (c.type !== READY) (out ??= []).push(c);
  return out;
}

/**
 * Statuses with nothing sandbox-specific (no failure to remember, no passed-through condition) are shared:
 * a view of a million ready sandboxes holds a handful of status objects, not a million. They are frozen
 * values, so sharing them keeps compose() pure. Bounded: past the cap the table starts afresh.
 */
const SHARED_STATUSES = new Map<string, PublicStatus>();
const SHARED_STATUSES_MAX = 4096;
/** The shared status each rule gave last. */
const LAST_SHARED = new Map<RuleName, PublicStatus>();

/** The status of `rule`, whose Ready condition has `readyStatus`, `reason` and `message`. */
function status(
  rule: RuleName,
  phase: PublicPhase,
  readyStatus: Condition['status'],
  reason: string,
  message: string,
  b: BackendSnapshot,
  failure?: PublicStatus['failure'],
): PublicStatus {
  const extra = passthrough(b);
  if (failure !== undefined || extra !== undefined) {
    const ready = readyCondition(readyStatus, reason, message);
    return { phase, reason, message, conditions: extra === undefined ? [ready] : [ready, ...extra], rule, failure };
  }
  // Most recompositions (a driver's heartbeat update) land on the status the same rule gave last time:
  // compare with that before building the table's key (a string and a hash) or the condition.
  const last = LAST_SHARED.get(rule);
  if (last !== undefined && last.phase === phase && last.reason === reason && last.message === message && last.conditions[0]!.status === readyStatus) return last;
  const key = rule + '\u0000' + readyStatus + '\u0000' + reason + '\u0000' + message;
  let shared = SHARED_STATUSES.get(key);
  if (shared === undefined) {
    if (SHARED_STATUSES.size >= SHARED_STATUSES_MAX) SHARED_STATUSES.clear();
    shared = Object.freeze({ phase, reason, message, conditions: Object.freeze([Object.freeze(readyCondition(readyStatus, reason, message))]), rule, failure: undefined });
    SHARED_STATUSES.set(key, shared);
  }
  LAST_SHARED.set(rule, shared);
  return shared;
}

/** The backend's own reason for not being ready; a Ready=True condition lingering on a paused or deleting object is no reason. */
function backendReason(b: BackendSnapshot, fallback: string): { reason: string; message: string } {
  const ready = findCondition(b.conditions, READY);
  if (ready !== undefined && ready.status !== 'True' && ready.reason !== '') return { reason: ready.reason, message: ready.message };
  return { reason: fallback, message: '' };
}

/**
 * Composes the public status of one sandbox. Pure: `now` is epoch milliseconds, `prior` is the status
 * composed last time for the same sandbox (it carries the sticky failure).
 */
export function compose(
  b: BackendSnapshot,
  presence: Presence | undefined,
  now: number,
  prior?: PublicStatus,
): PublicStatus {
  const ready = findCondition(b.conditions, READY);

  if (b.state === 'deleting') {
    const r = backendReason(b, 'Deleting');
    return status('deleting', 'Deleting', 'False', r.reason, r.message || 'The sandbox is being deleted', b);
  }
  if ((b.shutdownTime !== undefined && b.shutdownTime <= now) || (ready?.status === 'False' && ready.reason === REASON_SANDBOX_EXPIRED)) {
    return status('expired', 'Deleting', 'False', REASON_SANDBOX_EXPIRED, 'The sandbox has passed its shutdown time', b);
  }
  if (b.state === 'failed') {
    const r = backendReason(b, 'Failed');
    return status('failed', 'Error', 'False', r.reason, r.message || 'The sandbox has failed', b, {
      uid: b.uid,
      instanceId: b.instanceId,
    });
  }
  const f = prior?.failure;
  if (f !== undefined && f.uid === b.uid && f.instanceId === b.instanceId) {
    return status('error-sticky', 'Error', 'False', prior!.reason, prior!.message, b, f);
  }
  if (b.state === 'paused') {
    const r = backendReason(b, 'SandboxPaused');
    return status('paused', 'Paused', 'False', r.reason, r.message || 'The sandbox is paused', b);
  }
  const updating = isUpdating(b, ready);
  if (updating !== undefined) {
    return status('updating', 'Updating', 'False', updating.reason, updating.message || 'In-place update in progress', b);
  }
  if (b.state === 'starting') {
    if (ready !== undefined && ready.status === 'Unknown') {
      return status('unknown', 'Unknown', 'Unknown', ready.reason || 'Unknown', ready.message, b);
    }
    const r = backendReason(b, 'Starting');
    return status('starting', 'Provisioning', 'False', r.reason, r.message || 'The sandbox is starting', b);
  }
  // b.state === 'ready'
  if (b.sessionModel === 'none') {
    return status('ready-no-session-needed', 'Ready', 'True', REASON_DEPENDENCIES_READY, 'Backend ready', b);
  }
  if (presence !== undefined) {
    // The owning gateway is in the session itself (the status API shows it); a constant message keeps
    // this status shareable between sandboxes.
    return status('ready-with-session', 'Ready', 'True', REASON_DEPENDENCIES_READY, 'Backend ready; supervisor session connected', b);
  }
  return status('supervisor-not-connected', 'Provisioning', 'False', REASON_SUPERVISOR_NOT_CONNECTED, 'Backend ready; waiting for supervisor session', b);
}

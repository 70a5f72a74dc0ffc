import { describe, expect, it } from 'vitest';
import { compose } from '../../src/domain/compose.js';
import type { BackendSnapshot, Presence, PublicPhase } from '../../src/domain/sandbox.js';
import { mapAgentSandbox } from '../../src/drivers/kubernetes/agent-sandbox-mapping.js';
import { mapOpenKruiseSandbox } from '../../src/drivers/kubernetes/openkruise-mapping.js';
import { fixture, loadKubeFixtures, type KubeObject } from '../helpers/fake-kube-api.js';

/** The mapped snapshots, fed through compose(): the public phase each CRD state ends up as. */

const AGENT = loadKubeFixtures('agent-sandbox');
const KRUISE = loadKubeFixtures('openkruise');
const OPTS = { defaultSessionModel: 'required' } as const;
/** Before every shutdownTime in the fixtures except `expired`'s. */
const NOW = Date.parse('2026-01-10T11:30:00Z');
const SESSION: Presence = { gatewayId: 'gw-1', sessionId: 's-1', instanceId: 'i-1', epoch: 1, since: NOW - 1000 };

function agent(name: string | KubeObject): BackendSnapshot {
  return mapAgentSandbox(typeof name === 'string' ? fixture(AGENT, name) : name, OPTS)!;
}
function kruise(name: string | KubeObject): BackendSnapshot {
  return mapOpenKruiseSandbox(typeof name === 'string' ? fixture(KRUISE, name) : name, OPTS)!;
}

interface Row {
  readonly what: string;
  readonly snapshot: () => BackendSnapshot;
  readonly presence?: Presence;
  readonly now?: number;
  readonly phase: PublicPhase;
  readonly reason: string;
}

// One row per fixture state and the phase it composes to: the table is the specification, so rows
// that differ in one value stay rows.
const TABLE: readonly Row[] = [
  { what: 'agent-sandbox Ready=True, no session', snapshot: () => agent('ready'), phase: 'Provisioning', reason: 'SupervisorNotConnected' },
  { what: 'agent-sandbox Ready=True with a session', snapshot: () => agent('ready'), presence: SESSION, phase: 'Ready', reason: 'DependenciesReady' },
  { what: 'agent-sandbox supervisor: none', snapshot: () => agent('annotated'), phase: 'Ready', reason: 'DependenciesReady' },
  { what: 'agent-sandbox replicas 0', snapshot: () => agent('suspended'), presence: SESSION, phase: 'Paused', reason: 'SandboxSuspended' },
  { what: 'agent-sandbox resume in progress', snapshot: () => agent('resuming'), phase: 'Provisioning', reason: 'SandboxSuspended' },
  { what: 'agent-sandbox Suspended lingering after resume', snapshot: () => agent('resumed-suspended-lingers'), presence: SESSION, phase: 'Ready', reason: 'DependenciesReady' },
  { what: 'agent-sandbox SandboxExpired', snapshot: () => agent('expired'), presence: SESSION, phase: 'Deleting', reason: 'SandboxExpired' },
  { what: 'agent-sandbox being deleted', snapshot: () => agent('deleting'), presence: SESSION, phase: 'Deleting', reason: 'Deleting' },
  { what: 'agent-sandbox PodFailed', snapshot: () => agent('pod-failed'), phase: 'Error', reason: 'PodFailed' },
  { what: 'agent-sandbox ReconcilerError (transient)', snapshot: () => agent('reconciler-error'), phase: 'Provisioning', reason: 'ReconcilerError' },
  { what: 'agent-sandbox without status', snapshot: () => agent('no-status'), phase: 'Unknown', reason: 'NoStatus' },
  { what: 'agent-sandbox resize in progress', snapshot: () => agent('resize-in-progress'), presence: SESSION, phase: 'Ready', reason: 'DependenciesReady' },
  {
    what: 'agent-sandbox past spec.shutdownTime before the controller noticed',
    snapshot: () => agent('annotated'),
    now: Date.parse('2030-01-01T00:00:01Z'),
    phase: 'Deleting',
    reason: 'SandboxExpired',
  },
  { what: 'OpenKruise running, no session', snapshot: () => kruise('running'), phase: 'Provisioning', reason: 'SupervisorNotConnected' },
  { what: 'OpenKruise running with a session', snapshot: () => kruise('running'), presence: SESSION, phase: 'Ready', reason: 'DependenciesReady' },
  { what: 'OpenKruise in-place update (seed: InPlaceUpdateReady=False, Ready=False PodReady)', snapshot: () => kruise('inplace-updating'), presence: SESSION, phase: 'Updating', reason: 'InplaceUpdating' },
  { what: 'OpenKruise in-place update (v0.3.0: Ready=False InplaceUpdating)', snapshot: () => kruise('inplace-updating-v030'), presence: SESSION, phase: 'Updating', reason: 'InplaceUpdating' },
  { what: 'OpenKruise in-place update done', snapshot: () => kruise('inplace-done'), presence: SESSION, phase: 'Ready', reason: 'DependenciesReady' },
  { what: 'OpenKruise in-place update refused, pod still Ready', snapshot: () => kruise('inplace-forbidden'), presence: SESSION, phase: 'Ready', reason: 'DependenciesReady' },
  { what: 'OpenKruise upgrade (Recreate)', snapshot: () => kruise('upgrading'), presence: SESSION, phase: 'Updating', reason: 'Upgrading' },
  { what: 'OpenKruise upgrade failed', snapshot: () => kruise('upgrade-failed'), phase: 'Error', reason: 'Upgrading' },
  { what: 'OpenKruise paused', snapshot: () => kruise('paused'), phase: 'Paused', reason: 'PodReady' },
  { what: 'OpenKruise resuming', snapshot: () => kruise('resuming'), phase: 'Provisioning', reason: 'PodReady' },
  { what: 'OpenKruise pending', snapshot: () => kruise('pending'), phase: 'Provisioning', reason: 'Pending' },
  { what: 'OpenKruise without status', snapshot: () => kruise('no-status'), phase: 'Unknown', reason: 'NoStatus' },
  { what: 'OpenKruise StartContainerFailed', snapshot: () => kruise('start-container-failed'), phase: 'Error', reason: 'StartContainerFailed' },
  { what: 'OpenKruise Terminating', snapshot: () => kruise('terminating'), presence: SESSION, phase: 'Deleting', reason: 'Deleting' },
  { what: 'OpenKruise infeasible CPU resize keeps serving', snapshot: () => kruise('resize-infeasible'), presence: SESSION, phase: 'Ready', reason: 'DependenciesReady' },
  { what: 'OpenKruise CPU resize in progress keeps serving', snapshot: () => kruise('resize-in-progress'), presence: SESSION, phase: 'Ready', reason: 'DependenciesReady' },
];

describe('Kubernetes snapshots through compose()', () => {
  it.each(TABLE)('$what → $phase', (row) => {
    const status = compose(row.snapshot(), row.presence, row.now ?? NOW);
    expect({ phase: status.phase, reason: status.reason }).toEqual({ phase: row.phase, reason: row.reason });
  });

  it('passes the resize conditions through to the public status', () => {
    const status = compose(kruise('resize-infeasible'), SESSION, NOW);
    expect(status.conditions.map((c) => c.type)).toEqual(['Ready', 'InplaceUpdate', 'PodResizePending']);
  });

  it('keeps Error sticky for the same pod, and lets a replaced pod recover', () => {
    const failed = compose(agent('pod-failed'), undefined, NOW);
    expect(failed.phase).toBe('Error');
    // The controller reports Ready again for the same pod (same address, same generation): still Error.
    const same = fixture(AGENT, 'pod-failed');
    (same.status as { conditions: Record<string, unknown>[] }).conditions[0] = { type: 'Ready', status: 'True', reason: 'DependenciesReady' };
    expect(compose(agent(same), SESSION, NOW, failed).phase).toBe('Error');
    // A new pod (new address) is a lifecycle change.
    (same.status as { podIPs: string[] }).podIPs = ['10.0.3.99'];
    expect(compose(agent(same), SESSION, NOW, failed).phase).toBe('Ready');
  });
});

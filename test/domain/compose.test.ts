import { describe, expect, it } from 'vitest';
import { compose, RULES, type RuleName } from '../../src/domain/compose.js';
import type { BackendSnapshot, Presence, PublicPhase, PublicStatus } from '../../src/domain/sandbox.js';
import { cond, presence, snapshot } from '../helpers/snapshots.js';

const NOW = Date.parse('2026-11-21T12:00:00Z');
const live = presence();

interface Row {
  readonly rule: RuleName;
  readonly why: string;
  readonly backend: BackendSnapshot;
  readonly presence?: Presence;
  readonly prior?: PublicStatus;
  readonly phase: PublicPhase;
  readonly reason?: string;
}

const failedPrior = compose(snapshot({ state: 'failed', conditions: [cond('Ready', 'False', 'PodFailed', 'OOMKilled')] }), undefined, NOW);

const table: Row[] = [
  { rule: 'deleting', why: 'deleting passes through', backend: snapshot({ state: 'deleting' }), presence: live, phase: 'Deleting' },
  { rule: 'deleting', why: 'deleting beats a failure', backend: snapshot({ state: 'deleting', conditions: [cond('Ready', 'False', 'PodFailed')] }), phase: 'Deleting' },
  { rule: 'expired', why: 'shutdownTime passed', backend: snapshot({ shutdownTime: NOW - 1 }), presence: live, phase: 'Deleting', reason: 'SandboxExpired' },
  { rule: 'expired', why: 'shutdownTime exactly now', backend: snapshot({ shutdownTime: NOW }), presence: live, phase: 'Deleting' },
  { rule: 'ready-with-session', why: 'shutdownTime in the future does not expire', backend: snapshot({ shutdownTime: NOW + 1 }), presence: live, phase: 'Ready' },
  { rule: 'expired', why: 'Ready=False reason SandboxExpired', backend: snapshot({ state: 'starting', conditions: [cond('Ready', 'False', 'SandboxExpired')] }), phase: 'Deleting' },
  { rule: 'failed', why: 'terminal failure passes through', backend: snapshot({ state: 'failed', conditions: [cond('Ready', 'False', 'PodFailed', 'OOMKilled')] }), presence: live, phase: 'Error', reason: 'PodFailed' },
  { rule: 'error-sticky', why: 'a later Ready snapshot of the same instance does not revive Error', backend: snapshot(), presence: live, prior: failedPrior, phase: 'Error', reason: 'PodFailed' },
  { rule: 'error-sticky', why: 'sticky through a pause of the same instance', backend: snapshot({ state: 'paused' }), prior: failedPrior, phase: 'Error' },
  { rule: 'ready-with-session', why: 'a new instanceId clears the failure', backend: snapshot({ instanceId: 'inst-2' }), presence: live, prior: failedPrior, phase: 'Ready' },
  { rule: 'ready-with-session', why: 'a new uid clears the failure', backend: snapshot({ uid: 'uid-2' }), presence: live, prior: failedPrior, phase: 'Ready' },
  { rule: 'paused', why: 'paused passes through', backend: snapshot({ state: 'paused', conditions: [cond('Ready', 'False', 'SandboxSuspended')] }), presence: live, phase: 'Paused', reason: 'SandboxSuspended' },
  { rule: 'updating', why: 'OpenKruise Ready=False reason InplaceUpdating', backend: snapshot({ state: 'starting', conditions: [cond('Ready', 'False', 'InplaceUpdating')] }), presence: live, phase: 'Updating', reason: 'InplaceUpdating' },
  { rule: 'updating', why: 'OpenKruise Ready=False reason Upgrading', backend: snapshot({ state: 'starting', conditions: [cond('Ready', 'False', 'Upgrading')] }), phase: 'Updating', reason: 'Upgrading' },
  {
    rule: 'updating',
    why: 'InPlaceUpdateReady=False with Ready=False (seed step 2: reason PodReady)',
    backend: snapshot({ state: 'starting', conditions: [cond('InPlaceUpdateReady', 'False'), cond('Ready', 'False', 'PodReady')] }),
    phase: 'Updating',
    reason: 'InplaceUpdating',
  },
  {
    rule: 'updating',
    why: 'InplaceUpdate reason InplaceUpdating',
    backend: snapshot({ state: 'starting', conditions: [cond('Ready', 'False', 'PodReady'), cond('InplaceUpdate', 'False', 'InplaceUpdating')] }),
    phase: 'Updating',
  },
  { rule: 'updating', why: 'revision differs from the pod revision while not Ready', backend: snapshot({ state: 'starting', conditions: [cond('Ready', 'False', 'PodReady')], revision: { desired: 'b', current: 'a' } }), phase: 'Updating' },
  {
    rule: 'ready-with-session',
    why: 'an update rejected for in-place (InPlaceUpdateReady=False with a message, Ready=True) stays Ready and shows the message',
    backend: snapshot({ conditions: [cond('Ready', 'True', 'PodReady'), cond('InPlaceUpdateReady', 'False', 'Rejected', 'only image and resources may change in place')] }),
    presence: live,
    phase: 'Ready',
  },
  {
    rule: 'ready-with-session',
    why: 'CPU resize in progress never changes routing',
    backend: snapshot({ conditions: [cond('Ready', 'True', 'PodReady'), cond('PodResizeInProgress', 'True')] }),
    presence: live,
    phase: 'Ready',
  },
  {
    rule: 'ready-with-session',
    why: 'an OpenKruise claim-time CPU resize (InplaceUpdate reason InplaceUpdating while Ready=True) never changes routing',
    backend: snapshot({ conditions: [cond('Ready', 'True', 'PodReady'), cond('InplaceUpdate', 'False', 'InplaceUpdating')] }),
    presence: live,
    phase: 'Ready',
  },
  { rule: 'paused', why: 'a Ready=True condition lingering on a paused object is not its reason', backend: snapshot({ state: 'paused' }), phase: 'Paused', reason: 'SandboxPaused' },
  { rule: 'deleting', why: 'a Ready=True condition lingering on a deleting object is not its reason', backend: snapshot({ state: 'deleting' }), phase: 'Deleting', reason: 'Deleting' },
  {
    rule: 'ready-with-session',
    why: 'an infeasible resize shows as a condition only',
    backend: snapshot({ conditions: [cond('Ready', 'True', 'PodReady'), cond('PodResizePending', 'True', 'Infeasible', 'Node has 4 CPUs')] }),
    presence: live,
    phase: 'Ready',
  },
  { rule: 'unknown', why: 'no status yet', backend: snapshot({ state: 'starting', conditions: [cond('Ready', 'Unknown', 'NoStatus')] }), phase: 'Unknown' },
  { rule: 'starting', why: 'starting is Provisioning', backend: snapshot({ state: 'starting', conditions: [cond('Ready', 'False', 'DependenciesNotReady')] }), presence: live, phase: 'Provisioning', reason: 'DependenciesNotReady' },
  { rule: 'starting', why: 'starting without conditions', backend: snapshot({ state: 'starting', conditions: [] }), phase: 'Provisioning', reason: 'Starting' },
  { rule: 'ready-no-session-needed', why: 'session model none', backend: snapshot({ sessionModel: 'none' }), phase: 'Ready', reason: 'DependenciesReady' },
  { rule: 'ready-with-session', why: 'backend ready and a live session', backend: snapshot(), presence: live, phase: 'Ready', reason: 'DependenciesReady' },
  { rule: 'supervisor-not-connected', why: 'backend ready without a session', backend: snapshot(), phase: 'Provisioning', reason: 'SupervisorNotConnected' },
  {
    rule: 'supervisor-not-connected',
    why: 'a later driver snapshot saying Ready never re-promotes a sandbox without a session',
    backend: snapshot({ resourceVersion: '9', conditions: [cond('Ready', 'True', 'DependenciesReady')] }),
    prior: compose(snapshot(), undefined, NOW),
    phase: 'Provisioning',
    reason: 'SupervisorNotConnected',
  },
];

describe('compose()', () => {
  it.each(table.map((r) => [r.rule, r.why, r] as const))('%s: %s', (_rule, _why, row) => {
    const got = compose(row.backend, row.presence, NOW, row.prior);
    expect(got.phase).toBe(row.phase);
    expect(got.rule).toBe(row.rule);
    if (row.reason !== undefined) expect(got.reason).toBe(row.reason);
    const ready = got.conditions.find((c) => c.type === 'Ready');
    expect(ready?.status).toBe(row.phase === 'Ready' ? 'True' : row.phase === 'Unknown' ? 'Unknown' : 'False');
  });

  it('names every rule in the table', () => {
    const covered = new Set(table.map((r) => r.rule));
    for (const r of RULES) expect(covered, `rule ${r.name} has no row`).toContain(r.name);
  });

  it('Ready ⇔ backend ready ∧ (session model none ∨ live session), over every combination', () => {
    for (const state of ['starting', 'ready', 'paused', 'deleting', 'failed'] as const) {
      for (const sessionModel of ['required', 'none'] as const) {
        for (const p of [undefined, live]) {
          const got = compose(snapshot({ state, sessionModel }), p, NOW);
          const want = state === 'ready' && (sessionModel === 'none' || p !== undefined);
          expect(got.phase === 'Ready', `${state}/${sessionModel}/${p ? 'session' : 'none'}`).toBe(want);
        }
      }
    }
  });

  it('backend ready without a session says why, in the reference wording', () => {
    const got = compose(snapshot(), undefined, NOW);
    expect(got.conditions[0]).toEqual({ type: 'Ready', status: 'False', reason: 'SupervisorNotConnected', message: 'Backend ready; waiting for supervisor session' });
  });

  it('passes backend conditions other than Ready through (rejected update message, infeasible resize)', () => {
    const got = compose(snapshot({ conditions: [cond('Ready', 'True'), cond('PodResizePending', 'True', 'Infeasible', 'Node has 4 CPUs')] }), live, NOW);
    expect(got.conditions).toContainEqual(cond('PodResizePending', 'True', 'Infeasible', 'Node has 4 CPUs'));
  });

  it('in-place update then supervisor reconnect returns to Ready without passing through Error', () => {
    const seen: PublicPhase[] = [];
    let prior: PublicStatus | undefined;
    const steps: [BackendSnapshot, Presence | undefined][] = [
      [snapshot(), live],
      [snapshot({ state: 'starting', conditions: [cond('InPlaceUpdateReady', 'False'), cond('Ready', 'False', 'PodReady')] }), live],
      [snapshot({ state: 'starting', conditions: [cond('InPlaceUpdateReady', 'False'), cond('Ready', 'False', 'PodReady')] }), undefined],
      [snapshot({ conditions: [cond('InPlaceUpdateReady', 'True'), cond('Ready', 'True', 'PodReady')] }), undefined],
      [snapshot({ conditions: [cond('InPlaceUpdateReady', 'True'), cond('Ready', 'True', 'PodReady')] }), presence({ sessionId: 's-2', epoch: 2 })],
    ];
    for (const [b, p] of steps) {
      prior = compose(b, p, NOW, prior);
      seen.push(prior.phase);
    }
    expect(seen).toEqual(['Ready', 'Updating', 'Updating', 'Provisioning', 'Ready']);
  });
});

import { afterEach, describe, expect, it } from 'vitest';
import { ExampleDriver } from '../../examples/driver/example-driver.js';
import { STYLES, type Style, type StyleRecords } from '../../examples/driver/styles.js';
import { REASON_DEPENDENCIES_READY, REASON_SANDBOX_EXPIRED, REASON_SUPERVISOR_NOT_CONNECTED, RULES, type RuleName } from '../../src/domain/compose.js';
import { decide, type RouteTable } from '../../src/domain/decide.js';
import type { ErrorCode } from '../../src/domain/errors.js';
import type { PublicPhase } from '../../src/domain/sandbox.js';
import { GrpcDriver } from '../../src/drivers/grpc/grpc-driver.js';
import { SandboxView } from '../../src/view/sandbox-view.js';
import { ViewSink } from '../helpers/view-sink.js';

/**
 * The four-driver conformance matrix. Each scenario names a rule of compose() and says the same thing
 * natively in each backend's own words — a Docker container's State, a Podman container's State, a VM
 * manager's record, a Kubernetes Sandbox's conditions — with or without a live supervisor session. Each
 * cell runs the example driver of that style on a loopback port, a GrpcDriver feeding a real SandboxView,
 * and checks the public phase, the rule and the routing decision. One expectation per scenario, checked on
 * every style: "Ready" means the same thing whichever backend runs the sandbox.
 */

const NS = 'conf';
const NAME = 'sbx';
const NOW = Date.parse('2030-01-01T12:00:00Z');
const PAST = '2030-01-01T11:00:00Z';
const STARTED = '2030-01-01T10:00:00Z';
const RESTARTED = '2030-01-01T11:30:00Z';
const IP = '10.0.0.7';
const PORT = 8000;

type Patch<T> = { [K in keyof T]?: T[K] extends readonly unknown[] ? T[K] : T[K] extends object ? Patch<T[K]> : T[K] };

function merge<T>(base: T, patch: Patch<T>): T {
  const out: Record<string, unknown> = { ...(base as Record<string, unknown>) };
  for (const [k, v] of Object.entries(patch as Record<string, unknown>)) {
    const b = out[k];
    out[k] = v !== null && typeof v === 'object' && !Array.isArray(v) && b !== null && typeof b === 'object' && !Array.isArray(b) ? merge(b, v) : v;
  }
  return out as T;
}

const LABELS = { 'sandgate.dev/namespace': NS, 'sandgate.dev/name': NAME, 'sandgate.dev/sandbox-id': 'sbx-1' };

/** Each style's record of a running, healthy sandbox that runs a supervisor. Scenarios patch these. */
const BASE: { readonly [S in Style]: StyleRecords[S] } = {
  docker: {
    Id: 'c0ffee01',
    Name: '/' + NAME,
    Config: { Labels: LABELS },
    State: { Status: 'running', ExitCode: 0, Error: '', StartedAt: STARTED, Health: { Status: 'healthy' } },
    NetworkSettings: { IPAddress: IP },
  },
  podman: {
    Id: 'beef0001',
    Name: NAME,
    Config: { Labels: LABELS },
    State: { Status: 'running', ExitCode: 0, OOMKilled: false, StartedAt: STARTED, Healthcheck: { Status: 'healthy' } },
    NetworkSettings: { IPAddress: IP },
  },
  vm: {
    vm_id: 'vm-01',
    boot_id: 'boot-1',
    state: 'Running',
    destroying: false,
    guest_agent: { ready: true },
    network: { tap_ip: IP },
    metadata: { namespace: NS, name: NAME, sandbox_id: 'sbx-1' },
  },
  kubernetes: {
    metadata: { namespace: NS, name: NAME, uid: 'uid-01', labels: { 'sandgate.dev/sandbox-id': 'sbx-1' } },
    spec: { replicas: 1 },
    status: { conditions: [{ type: 'Ready', status: 'True', reason: 'DependenciesReady' }], podIPs: [IP], podUID: 'pod-1' },
  },
};

type Native = { readonly [S in Style]?: Patch<StyleRecords[S]> };

interface Outcome {
  readonly phase: PublicPhase;
  readonly rule: RuleName;
  /** `allow`, or the code decide() denies with. */
  readonly decision: 'allow' | ErrorCode;
}

/** One step: the backend reports (each style's BASE with its patch), or the supervisor session comes or goes. */
type Step = ({ readonly backend: Native } | { readonly session: boolean }) & { readonly expect?: Outcome };

interface Scenario {
  readonly title: string;
  readonly steps: readonly Step[];
  readonly expect: Outcome;
  /** Styles whose backend has no native way to say this, and why. */
  readonly cannot?: { readonly [S in Style]?: string };
}

const kubeReady = (status: 'True' | 'False' | 'Unknown', reason: string) => ({ status: { conditions: [{ type: 'Ready', status, reason }] } });

const RUNNING: Native = { docker: {}, podman: {}, vm: {}, kubernetes: {} };
const FAILED: Native = {
  docker: { State: { Status: 'exited', ExitCode: 137 } },
  podman: { State: { Status: 'exited', ExitCode: 137 } },
  vm: { state: 'Crashed' },
  kubernetes: kubeReady('False', 'PodFailed'),
};
const NOT_READY: Outcome = { phase: 'Provisioning', rule: 'supervisor-not-connected', decision: 'sandbox_not_ready' };
const READY: Outcome = { phase: 'Ready', rule: 'ready-with-session', decision: 'allow' };

/** The matrix, one row per scenario. Every rule of compose() appears at least once. */
const SCENARIOS: Record<RuleName, readonly Scenario[]> = {
  deleting: [
    {
      title: 'the backend is tearing the sandbox down (even with a live session)',
      steps: [{ session: true }, { backend: { docker: { State: { Status: 'removing' } }, podman: { State: { Status: 'removing' } }, vm: { destroying: true }, kubernetes: { metadata: { deletionTimestamp: PAST } } } }],
      expect: { phase: 'Deleting', rule: 'deleting', decision: 'sandbox_gone' },
    },
  ],
  expired: [
    {
      title: 'the shutdown time has passed while the backend still runs',
      steps: [
        { session: true },
        {
          backend: {
            docker: { Config: { Labels: { ...LABELS, 'sandgate.dev/shutdown-time': PAST } } },
            podman: { Config: { Labels: { ...LABELS, 'sandgate.dev/shutdown-time': PAST } } },
            vm: { expires_at: PAST },
            kubernetes: { spec: { shutdownTime: PAST } },
          },
        },
      ],
      expect: { phase: 'Deleting', rule: 'expired', decision: 'sandbox_gone' },
    },
    {
      title: 'the backend itself reports the sandbox expired (agent-sandbox shutdownPolicy Retain)',
      cannot: {
        docker: 'containers have no expiry of their own; the label is only a time',
        podman: 'containers have no expiry of their own; the label is only a time',
        vm: 'the VM manager removes expired VMs; it reports no expired state',
      },
      steps: [{ session: true }, { backend: { kubernetes: kubeReady('False', 'SandboxExpired') } }],
      expect: { phase: 'Deleting', rule: 'expired', decision: 'sandbox_gone' },
    },
  ],
  failed: [
    {
      title: 'the workload failed (even with a live session)',
      steps: [{ session: true }, { backend: FAILED }],
      expect: { phase: 'Error', rule: 'failed', decision: 'sandbox_failed' },
    },
  ],
  'error-sticky': [
    {
      title: 'a failed instance that reports running again stays Error',
      steps: [{ session: true }, { backend: FAILED, expect: { phase: 'Error', rule: 'failed', decision: 'sandbox_failed' } }, { backend: RUNNING }],
      expect: { phase: 'Error', rule: 'error-sticky', decision: 'sandbox_failed' },
    },
  ],
  paused: [
    {
      title: 'the backend paused the sandbox (even with a live session)',
      steps: [
        { session: true },
        { backend: { docker: { State: { Status: 'paused' } }, podman: { State: { Status: 'paused' } }, vm: { state: 'Paused' }, kubernetes: { spec: { replicas: 0 }, ...kubeReady('False', 'SandboxSuspended') } } },
      ],
      expect: { phase: 'Paused', rule: 'paused', decision: 'sandbox_paused' },
    },
  ],
  updating: [
    {
      title: 'an in-place update is in progress',
      cannot: {
        docker: 'an update recreates the container (a new Id, so a new uid): never in place',
        podman: 'podman auto-update recreates the container (a new Id, so a new uid): never in place',
        vm: 'a new image boots a new VM (a new vm_id): never in place',
      },
      steps: [{ session: true }, { backend: { kubernetes: { status: { ...kubeReady('False', 'InplaceUpdating').status, updateRevision: 'r2', currentRevision: 'r1' } } } }],
      expect: { phase: 'Updating', rule: 'updating', decision: 'sandbox_not_ready' },
    },
  ],
  starting: [
    {
      title: 'the backend is creating or booting the sandbox',
      steps: [{ backend: { docker: { State: { Status: 'created' } }, podman: { State: { Status: 'created' } }, vm: { state: 'Not started' }, kubernetes: kubeReady('False', 'DependenciesNotReady') } }],
      expect: { phase: 'Provisioning', rule: 'starting', decision: 'sandbox_not_ready' },
    },
    {
      title: 'the workload runs but its health check has not passed: a live session does not make it Ready',
      steps: [
        { session: true },
        {
          backend: {
            docker: { State: { Health: { Status: 'starting' } } },
            podman: { State: { Healthcheck: { Status: 'starting' } } },
            vm: { guest_agent: { ready: false } },
            kubernetes: kubeReady('False', 'DependenciesNotReady'),
          },
        },
      ],
      expect: { phase: 'Provisioning', rule: 'starting', decision: 'sandbox_not_ready' },
    },
  ],
  unknown: [
    {
      title: 'the backend has not reported a status yet',
      cannot: { docker: 'docker inspect always reports a State.Status; there is no "no status yet"' },
      steps: [{ backend: { podman: { State: { Status: 'unknown' } }, vm: { guest_agent: null }, kubernetes: { status: { conditions: [] } } } }],
      expect: { phase: 'Unknown', rule: 'unknown', decision: 'sandbox_not_ready' },
    },
  ],
  'ready-no-session-needed': [
    {
      title: 'the backend is ready and the sandbox runs no supervisor',
      steps: [
        {
          backend: {
            docker: { Config: { Labels: { ...LABELS, 'sandgate.dev/supervisor': 'none' } } },
            podman: { Config: { Labels: { ...LABELS, 'sandgate.dev/supervisor': 'none' } } },
            vm: { metadata: { supervisor: 'none' } },
            kubernetes: { metadata: { annotations: { 'sandgate.dev/supervisor': 'none' } } },
          },
        },
      ],
      expect: { phase: 'Ready', rule: 'ready-no-session-needed', decision: 'allow' },
    },
  ],
  'ready-with-session': [
    { title: 'the backend is ready and the supervisor is connected', steps: [{ backend: RUNNING }, { session: true }], expect: READY },
    {
      title: 'a restarted instance (new instance id) clears a sticky Error',
      steps: [
        { session: true },
        { backend: FAILED },
        { backend: { docker: { State: { StartedAt: RESTARTED } }, podman: { State: { StartedAt: RESTARTED } }, vm: { boot_id: 'boot-2' }, kubernetes: { status: { podUID: 'pod-2' } } } },
      ],
      expect: READY,
    },
    {
      title: 'a re-created sandbox (new uid) clears a sticky Error',
      steps: [{ session: true }, { backend: FAILED }, { backend: { docker: { Id: 'c0ffee02' }, podman: { Id: 'beef0002' }, vm: { vm_id: 'vm-02' }, kubernetes: { metadata: { uid: 'uid-02' } } } }],
      expect: READY,
    },
  ],
  'supervisor-not-connected': [
    { title: 'the backend is ready but no supervisor session is live', steps: [{ backend: RUNNING }], expect: NOT_READY },
    {
      title: 'regression: the backend reports Ready=True again after the session left, and the sandbox stays not Ready',
      steps: [
        { backend: RUNNING },
        { session: true, expect: READY },
        { session: false, expect: NOT_READY },
        // A fresh snapshot that says "ready" once more (a new resourceVersion) must not re-promote it.
        { backend: RUNNING },
      ],
      expect: NOT_READY,
    },
    {
      title: 'regression: a backend that becomes ready while no session exists does not become Ready',
      steps: [{ backend: { docker: { State: { Status: 'created' } }, podman: { State: { Status: 'created' } }, vm: { state: 'Not started' }, kubernetes: kubeReady('False', 'DependenciesNotReady') } }, { backend: RUNNING }],
      expect: NOT_READY,
    },
  ],
};

const ROUTE = { order: ['headers'] as const, baseDomain: 'sandboxes.test', defaultNamespace: 'default', defaultPort: PORT, pathPrefix: '' };
const REQUEST = { headers: { 'x-sandbox-namespace': NS, 'x-sandbox-id': NAME, 'x-sandbox-port': String(PORT) }, host: undefined, path: '/' };

function outcome(view: SandboxView): Outcome {
  const e = view.get(NS, NAME);
  if (e === undefined) throw new Error('the sandbox is not in the view');
  const d = decide(view as RouteTable, ROUTE, REQUEST);
  return { phase: e.status.phase, rule: e.status.rule as RuleName, decision: d.allow ? 'allow' : d.code };
}

/** Rules whose Ready reason the gateway sets itself: the reason is the same on every style too. */
const GATEWAY_REASONS: { readonly [R in RuleName]?: string } = {
  expired: REASON_SANDBOX_EXPIRED,
  'ready-no-session-needed': REASON_DEPENDENCIES_READY,
  'ready-with-session': REASON_DEPENDENCIES_READY,
  'supervisor-not-connected': REASON_SUPERVISOR_NOT_CONNECTED,
};

const running: { stop(): Promise<void> }[] = [];

afterEach(async () => {
  for (const r of running.splice(0).reverse()) await r.stop();
});

/** Runs one cell: the example driver of `style`, a GrpcDriver into a real view, the scenario's steps. */
async function runCell<S extends Style>(style: S, scenario: Scenario): Promise<Outcome> {
  const backend = await ExampleDriver.start({ style });
  running.push({ stop: () => backend.close() });
  const driver = new GrpcDriver({ name: style, address: backend.address, backoff: { initialMs: 10, maxMs: 50 } });
  const view = new SandboxView({ now: () => NOW });
  const sink = new ViewSink(driver.id, view);
  running.push(driver);
  await driver.start(sink);
  await sink.until(() => view.synced, 'the initial list');

  let epoch = 0;
  for (const [i, step] of scenario.steps.entries()) {
    if ('session' in step) {
      view.setPresence(NS, NAME, step.session ? { gatewayId: 'gw-1', sessionId: `s${++epoch}`, instanceId: 'supervisor-1', epoch, since: NOW } : undefined);
    } else {
      const patch = step.backend[style];
      if (patch === undefined) throw new Error(`step ${i} of "${scenario.title}" says nothing for ${style}`);
      const sent = backend.set(merge(BASE[style], patch as Patch<StyleRecords[S]>));
      await sink.until(() => view.get(NS, NAME)?.snapshot.resourceVersion === sent.resourceVersion, `step ${i} to reach the view`);
    }
    if (step.expect !== undefined) expect(outcome(view), `after step ${i}`).toEqual(step.expect);
  }
  expect(sink.errors).toEqual([]);
  const result = outcome(view);
  const reason = GATEWAY_REASONS[result.rule];
  if (reason !== undefined) expect(view.get(NS, NAME)?.status.reason).toBe(reason);
  return result;
}

describe('driver conformance: the same public answer on every backend style', () => {
  for (const rule of RULES) {
    for (const scenario of SCENARIOS[rule.name]) {
      describe(`${rule.name}: ${scenario.title}`, () => {
        it('expects the phase that RULES gives the rule', () => {
          expect(scenario.expect.phase).toBe(rule.phase);
          expect(scenario.expect.rule).toBe(rule.name);
        });
        for (const style of STYLES) {
          // A style that cannot say this natively (scenario.cannot, docs/driver-contract.md) has no cell.
          if (scenario.cannot?.[style] !== undefined) continue;
          it(`${style} → ${scenario.expect.phase} (${scenario.expect.rule}), ${scenario.expect.decision}`, async () => {
            expect(await runCell(style, scenario)).toEqual(scenario.expect);
          });
        }
      });
    }
  }

  it('covers every rule of compose(), each on at least two styles', () => {
    for (const rule of RULES) {
      const styles = new Set(SCENARIOS[rule.name].flatMap((s) => STYLES.filter((st) => s.cannot?.[st] === undefined)));
      expect(styles.size, rule.name).toBeGreaterThanOrEqual(rule.name === 'updating' ? 1 : 2);
    }
  });
});

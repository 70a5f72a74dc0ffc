import type { SandboxAccess } from './access-policy.js';
/**
 * What drivers report (backend state only, never a public phase), what sessions report (presence), and
 * what the gateway publishes (the composed public status).
 */

/** The backend's own view of the compute. `absent` is expressed by a deletion event, not a snapshot. */
export type BackendState = 'starting' | 'ready' | 'paused' | 'deleting' | 'failed';

export type ConditionStatus = 'True' | 'False' | 'Unknown';

/** A Kubernetes-style condition (metav1.Condition shape). */
export interface Condition {
  readonly type: string;
  readonly status: ConditionStatus;
  readonly reason: string;
  readonly message: string;
  /** RFC 3339 timestamp, as the backend reported it. */
  readonly lastTransitionTime?: string | undefined;
}

/** Where traffic for the sandbox goes. */
export type Endpoint =
  | { readonly kind: 'address'; readonly addresses: readonly string[] }
  | { readonly kind: 'service'; readonly fqdn: string }
  /** No inbound network: traffic rides the supervisor's outbound session. */
  | { readonly kind: 'relay' };

/** `required`: Ready needs a live supervisor session. `none`: the backend's readiness is enough. */
export type SessionModel = 'required' | 'none';

export interface BackendSnapshot {
  readonly namespace: string;
  readonly name: string;
  /** Identity of this incarnation; a delete-and-recreate gets a new uid. */
  readonly uid: string;
  /** Opaque version, ordered when it is a decimal number (Kubernetes, the file driver). */
  readonly resourceVersion: string;
  /** Identity of the running instance (pod uid, container id, VM id): changes on restart. */
  readonly instanceId: string;
  /**
   * Opaque ids that also name this sandbox (E2B-style hosts and headers). An id already held by another
   * sandbox, or of the form `<namespace>--<name>` of another sandbox, is refused (domain/sandbox-ids.ts).
   */
  readonly ids: readonly string[];
  /** Epoch ms the backend created this incarnation (decides who keeps a contested id); undefined when unknown. */
  readonly createdAt?: number | undefined;
  readonly state: BackendState;
  readonly conditions: readonly Condition[];
  readonly endpoint: Endpoint;
  readonly sessionModel: SessionModel;
  /** Allow-list of ports; undefined = any port. */
  readonly ports?: readonly number[] | undefined;
  /**
   * Ports that speak HTTP/2 with prior knowledge (h2c: gRPC servers, for example); requests to them are
   * carried over HTTP/2 end to end, trailers included. Every other port speaks HTTP/1.1. Undefined = none.
   */
  readonly h2cPorts?: readonly number[] | undefined;
  /**
   * Ports that carry raw TCP (sshd, a database): reached only through a tunnel (CONNECT or the WebSocket
   * tunnel, docs/tunnels.md), and no tunnel reaches any other port. Undefined = none.
   */
  readonly tcpPorts?: readonly number[] | undefined;
  /**
   * Ports anyone may open: a request to one needs no API key, traffic token or link (docs/links.md).
   * Routing, the port allow-list, readiness and the gateway's bounds still apply, and a credential a client
   * sends is still stripped. When `ports` is set, each public port is one of them. Undefined = none.
   */
  readonly publicPorts?: readonly number[] | undefined;
  /**
   * The sandbox's own access policy, per port and as a default for its other ports (docs/identity.md);
   * undefined = its namespace's. A port it makes `public` is also listed in `publicPorts`.
   */
  readonly access?: SandboxAccess | undefined;
  /** Epoch milliseconds after which the sandbox is expired (agent-sandbox spec.shutdownTime). */
  readonly shutdownTime?: number | undefined;
  /**
   * Traffic auth: the gateway's token for this sandbox's ports (E2B's `e2b-traffic-access-token`), or
   * `derived` to require HMAC(secret, sandbox id) (the gateway's `--traffic-token-secret`). Checked, then
   * stripped: the sandbox never sees it.
   */
  readonly accessToken?: string | { readonly derived: true } | undefined;
  /**
   * The in-sandbox daemon's own token (E2B envd's `X-Access-Token`; OpenKruise's
   * `agents.kruise.io/runtime-access-token`). When known, a request to the envd port carrying a different
   * one is refused at the edge; the header is forwarded either way, because envd checks it itself.
   */
  readonly envdAccessToken?: string | undefined;
  /** Resume this sandbox when traffic arrives while it is paused (overrides `--auto-resume`). */
  readonly resumeOnTraffic?: boolean | undefined;
  /** Pause after this long without traffic (overrides `--idle-timeout`; 0 = never). Milliseconds. */
  readonly idleTimeoutMs?: number | undefined;
  /** How long a request that wakes this sandbox waits for it (overrides `--readiness-wait-ms` for a wake). Milliseconds. */
  readonly wakeTimeoutMs?: number | undefined;
  /** Template revision the backend wants, and the one the running instance has (OpenKruise). */
  readonly revision?: { readonly desired: string; readonly current: string } | undefined;
}

/** One sandbox port's traffic activity, as gateways publish it to each other. */
export interface ActivityRecord {
  readonly namespace: string;
  readonly name: string;
  readonly port: number;
  /** Epoch ms. */
  readonly at: number;
}

/** A sandbox's last traffic activity, as the gateway reports it to its driver. */
export interface ActivityReport {
  readonly namespace: string;
  readonly name: string;
  /** Epoch ms of the last activity on any port. */
  readonly at: number;
  /** Port → epoch ms of its last activity. */
  readonly ports: ReadonlyMap<number, number>;
}

/** One sandbox's traffic activity as this gateway knows it (its own doors' and its peers'). */
export interface SandboxActivity {
  /** Epoch ms of the last activity on any port. */
  last: number;
  /** Port → epoch ms of its last activity. */
  readonly ports: Map<number, number>;
  /** True when this gateway saw activity since the last drain. */
  local: boolean;
}

/** Idle-pause outcomes, as `sandgate_lifecycle_pauses_total{result}` counts them. */
export const PAUSE_RESULTS = ['paused', 'unsupported', 'failed'] as const;
export type PauseResult = (typeof PAUSE_RESULTS)[number];

/** The idle controller's decision about one sandbox (docs/lifecycle.md). */
export interface IdleNote {
  readonly decision: PauseResult | 'skipped';
  readonly reason: string;
  /** Epoch ms of the decision. */
  readonly at: number;
}

/** What the operator API and console read of the lifecycle: activity, idle time, the last idle decision. */
export interface ActivityReadout {
  /** `--idle-timeout` in ms (0 = off): the timeout of sandboxes without their own. */
  readonly defaultIdleTimeoutMs: number;
  get(key: string): SandboxActivity | undefined;
  /** Epoch ms since which a Ready sandbox has been idle; undefined when not Ready. */
  idleSince(key: string): number | undefined;
  noteOf(key: string): IdleNote | undefined;
}

/** One change reported by a driver. */
export type DriverEvent =
  | { readonly type: 'upsert'; readonly snapshot: BackendSnapshot }
  | { readonly type: 'delete'; readonly namespace: string; readonly name: string; readonly uid: string; readonly resourceVersion: string };

/** A live supervisor session somewhere in the cluster. */
export interface Presence {
  readonly gatewayId: string;
  readonly sessionId: string;
  readonly instanceId: string;
  readonly epoch: number;
  /** Epoch milliseconds the session was accepted. */
  readonly since: number;
}

export type PublicPhase = 'Provisioning' | 'Ready' | 'Updating' | 'Paused' | 'Error' | 'Deleting' | 'Unknown';
export const PUBLIC_PHASES: readonly PublicPhase[] = ['Provisioning', 'Ready', 'Updating', 'Paused', 'Error', 'Deleting', 'Unknown'];

export interface PublicStatus {
  readonly phase: PublicPhase;
  /** Reason of the phase (the Ready condition's reason, or the failure's). */
  readonly reason: string;
  readonly message: string;
  readonly conditions: readonly Condition[];
  /** The rule of the composition table that decided the phase (docs/architecture.md). */
  readonly rule: string;
  /** Set while Error is sticky: the incarnation and instance the failure belongs to. */
  readonly failure?: { readonly uid: string; readonly instanceId: string } | undefined;
}

export function sandboxKey(namespace: string, name: string): string {
  return namespace + '/' + name;
}

import type { ActivityReport, BackendSnapshot, DriverEvent } from '../domain/sandbox.js';

/**
 * The driver contract in TypeScript (proto/sandgate/driver/v1/driver.proto is the same contract over
 * gRPC). A driver reports backend state only — never a public phase — through a sink the gateway gives
 * it. Drivers know nothing of sessions, the view or the front doors.
 */

export interface DriverSink {
  /** A full list (first list, relist, resync): everything not in it is gone. Marks the driver synced. */
  replace(snapshots: readonly BackendSnapshot[]): void;
  /** One change, applied in order. */
  apply(event: DriverEvent): void;
  /** A problem the driver recovered from (bad file kept the last good set, watch dropped and retried). */
  error(err: Error): void;
}

export interface Driver {
  /** Stable id for metrics, logs and the view (`file`, `kubernetes/agent-sandbox`, `grpc/docker`…). */
  readonly id: string;
  /** Starts reporting into `sink`. Resolves once started; the first replace() marks it synced. */
  start(sink: DriverSink): Promise<void>;
  stop(): Promise<void>;
  /** Asks the backend to resume a paused sandbox (auto-resume). Drivers that cannot, omit it. */
  resume?(namespace: string, name: string): Promise<void>;
  /**
   * Asks the backend to pause a running sandbox (idle pause, docs/lifecycle.md). Drivers that cannot, omit
   * it; one that learns only when asked (a remote driver answering UNIMPLEMENTED) rejects with a
   * SandgateError `driver_unsupported`, and the gateway does not ask it again.
   */
  pause?(namespace: string, name: string): Promise<void>;
  /**
   * Reports traffic activity to the backend (Kubernetes: the `sandgate.dev/last-activity` annotation).
   * The gateway batches: one call per report round, each sandbox at most once per
   * `--activity-patch-interval-ms` and only when its activity moved, from one gateway of the cluster.
   */
  reportActivity?(reports: readonly ActivityReport[]): Promise<void>;
}

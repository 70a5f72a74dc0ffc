import { credentials, Metadata, status as GrpcStatus, type ServiceError, type StatusObject } from '@grpc/grpc-js';
import { SandgateError } from '../../domain/errors.js';
import { sandboxKey, type ActivityReport, type BackendSnapshot } from '../../domain/sandbox.js';
import type { Driver, DriverSink } from '../driver.js';
import { DriverError } from './driver-error.js';
import { sandboxDriverClient, type SandboxDriverClient, type WireActivityReport, type WireWatchEvent } from './driver-proto.js';
import { deletionFromWire, msToTimestamp, snapshotFromWire } from './sandbox-codec.js';
import { backoffDelay, type BackoffOptions } from '../../lib/backoff.js';

/**
 * The remote driver: a client of a driver process that serves proto/sandgate/driver/v1/driver.proto.
 *
 * It holds one WatchSandboxes stream. The stream's initial list (snapshots up to `synced`) becomes one
 * `sink.replace()`, later events become `sink.apply()` in order. When the stream fails or ends it
 * reconnects after a jittered exponential backoff and relists, so whatever changed while it was away —
 * a sandbox deleted meanwhile included — is corrected by the next replace(). Until then the view keeps
 * serving the last known state, as a Kubernetes informer does across a watch gap.
 *
 * Every message is validated; a bad one is reported through `sink.error()` and dropped, never thrown.
 */

export const DEFAULT_BACKOFF: BackoffOptions = { initialMs: 250, maxMs: 10_000 };

export interface GrpcDriverOptions {
  /** The driver's name; its id is `grpc/<name>`. Letters, digits, `.`, `_`, `:`, `-`; at most 63. */
  readonly name: string;
  /** `host:port` of the driver process (`127.0.0.1:7000`, `[::1]:7000`, `driver.svc:7000`). Plaintext. */
  readonly address: string;
  /** Sent in WatchRequest for the driver's logs. */
  readonly gatewayId?: string;
  readonly backoff?: BackoffOptions;
  /** Randomness for the jitter, in [0, 1). */
  readonly random?: () => number;
  /** Deadline of Get and Resume calls. */
  readonly callTimeoutMs?: number;
  /**
   * HTTP/2 keepalive ping interval, so a driver host that vanished without closing the connection is
   * noticed. The default of 5 minutes is what gRPC servers accept without a policy change (grpc-go's
   * EnforcementPolicy.MinTime); a shorter interval needs the driver's server to permit it.
   */
  readonly keepaliveMs?: number;
  /** Folder holding `sandgate/driver/v1/driver.proto`; defaults to the package's `proto/`. */
  readonly protoDir?: string;
}

const NAME = /^[A-Za-z0-9._:-]{1,63}$/;

/**
 * Parses a driver URL `grpc://host:port` with an optional `?name=<name>` (default: `host:port`). Throws
 * SandgateError `config_invalid`.
 */
export function parseGrpcDriverUrl(url: string): { readonly address: string; readonly name: string } {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    throw new SandgateError('config_invalid', `driver ${JSON.stringify(url)} is not a URL; expected grpc://host:port`);
  }
  if (u.protocol !== 'grpc:' || u.hostname === '' || u.port === '' || u.username !== '' || u.password !== '' || (u.pathname !== '' && u.pathname !== '/') || u.hash !== '') {
    throw new SandgateError('config_invalid', `driver ${JSON.stringify(url)} must be grpc://host:port[?name=<name>]`);
  }
  for (const key of u.searchParams.keys()) {
    if (key !== 'name') throw new SandgateError('config_invalid', `driver ${JSON.stringify(url)}: unknown parameter ${JSON.stringify(key)}; allowed: name`);
  }
  const address = `${u.hostname}:${u.port}`;
  const name = u.searchParams.get('name') ?? address.replace(/[[\]]/g, '');
  if (!NAME.test(name)) throw new SandgateError('config_invalid', `driver name ${JSON.stringify(name)} must be 1-63 letters, digits, '.', '_', ':' or '-'`);
  return { address, name };
}

/** What one WatchSandboxes stream has received so far. */
interface StreamState {
  synced: boolean;
  listing: BackendSnapshot[];
}

export class GrpcDriver implements Driver {
  readonly id: string;
  private readonly opts: Required<Omit<GrpcDriverOptions, 'protoDir'>> & { readonly protoDir: string | undefined };
  private client: SandboxDriverClient | undefined;
  private call: ReturnType<SandboxDriverClient['WatchSandboxes']> | undefined;
  private loop: Promise<void> | undefined;
  private stopped = false;
  /** The driver answered ReportActivity with UNIMPLEMENTED: reports are not sent again. */
  private reportsRefused = false;
  private timer: NodeJS.Timeout | undefined;
  private wake: (() => void) | undefined;
  private streams = 0;

  constructor(opts: GrpcDriverOptions) {
    if (!NAME.test(opts.name)) throw new SandgateError('config_invalid', `driver name ${JSON.stringify(opts.name)} must be 1-63 letters, digits, '.', '_', ':' or '-'`);
    this.id = 'grpc/' + opts.name;
    this.opts = {
      name: opts.name,
      address: opts.address,
      gatewayId: opts.gatewayId ?? '',
      backoff: opts.backoff ?? DEFAULT_BACKOFF,
      random: opts.random ?? Math.random,
      callTimeoutMs: opts.callTimeoutMs ?? 10_000,
      keepaliveMs: opts.keepaliveMs ?? 300_000,
      protoDir: opts.protoDir,
    };
  }

  /** WatchSandboxes streams opened so far: 1 after the first connect, +1 per reconnect. */
  get streamsOpened(): number {
    return this.streams;
  }

  async start(sink: DriverSink): Promise<void> {
    if (this.client !== undefined || this.stopped) throw new Error(`driver ${this.id} cannot be started twice`);
    const Service = sandboxDriverClient(this.opts.protoDir);
    const { initialMs, maxMs } = this.opts.backoff;
    this.client = new Service(this.opts.address, credentials.createInsecure(), {
      'grpc.keepalive_time_ms': this.opts.keepaliveMs,
      'grpc.keepalive_timeout_ms': 20_000,
      // The channel's own reconnect backoff (default 1 s → 120 s) would otherwise outlast ours.
      'grpc.initial_reconnect_backoff_ms': Math.max(1, initialMs),
      'grpc.max_reconnect_backoff_ms': Math.max(1, maxMs),
    }) as unknown as SandboxDriverClient;
    this.loop = this.run(sink);
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    this.wake?.();
    this.call?.cancel();
    await this.loop;
    this.client?.close();
  }

  /** Asks the driver to resume a paused sandbox. Throws SandgateError `sandbox_not_found` or DriverError `driver_unavailable`. */
  async resume(namespace: string, name: string): Promise<void> {
    const client = this.ready();
    await new Promise<void>((resolve, reject) => {
      client.Resume({ namespace, name }, new Metadata(), { deadline: Date.now() + this.opts.callTimeoutMs }, (err) =>
        err ? reject(this.callError('resume', namespace, name, err)) : resolve(),
      );
    });
  }

  /**
   * Asks the driver to pause a sandbox (idle pause). Throws SandgateError `driver_unsupported` when the
   * driver answers UNIMPLEMENTED, `sandbox_not_found`, or DriverError `driver_unavailable`.
   */
  async pause(namespace: string, name: string): Promise<void> {
    const client = this.ready();
    await new Promise<void>((resolve, reject) => {
      client.Pause({ namespace, name }, new Metadata(), { deadline: Date.now() + this.opts.callTimeoutMs }, (err) => {
        if (err?.code === GrpcStatus.UNIMPLEMENTED) return reject(new SandgateError('driver_unsupported', `driver ${this.id} does not implement Pause`, { cause: err }));
        return err ? reject(this.callError('pause', namespace, name, err)) : resolve();
      });
    });
  }

  /** Sends one ActivityReport with every sandbox in `reports`. A driver answering UNIMPLEMENTED is not sent more. */
  async reportActivity(reports: readonly ActivityReport[]): Promise<void> {
    if (this.reportsRefused) return;
    const client = this.ready();
    const report: WireActivityReport = {
      sandboxes: reports.map((r) => ({
        namespace: r.namespace,
        name: r.name,
        last_activity: msToTimestamp(r.at),
        ports: [...r.ports].map(([port, at]) => ({ port, last_activity: msToTimestamp(at) })),
      })),
    };
    await new Promise<void>((resolve, reject) => {
      client.ReportActivity(report, new Metadata(), { deadline: Date.now() + this.opts.callTimeoutMs }, (err) => {
        if (err?.code === GrpcStatus.UNIMPLEMENTED) {
          this.reportsRefused = true;
          return resolve();
        }
        return err ? reject(new DriverError('driver_unavailable', `driver ${this.id}: ReportActivity failed: ${GrpcStatus[err.code]} ${err.details}`, { cause: err })) : resolve();
      });
    });
  }

  /** The driver's current snapshot of one sandbox; undefined when it does not know it. */
  async get(namespace: string, name: string): Promise<BackendSnapshot | undefined> {
    const client = this.ready();
    return new Promise((resolve, reject) => {
      client.Get({ namespace, name }, new Metadata(), { deadline: Date.now() + this.opts.callTimeoutMs }, (err, res) => {
        if (err) return err.code === GrpcStatus.NOT_FOUND ? resolve(undefined) : reject(this.callError('get', namespace, name, err));
        try {
          resolve(snapshotFromWire(res));
        } catch (e) {
          reject(e);
        }
      });
    });
  }

  private ready(): SandboxDriverClient {
    if (this.client === undefined || this.stopped) throw new DriverError('driver_unavailable', `driver ${this.id} is not running`);
    return this.client;
  }

  private callError(what: string, namespace: string, name: string, err: ServiceError): Error {
    if (err.code === GrpcStatus.NOT_FOUND) return new SandgateError('sandbox_not_found', `driver ${this.id} does not know ${sandboxKey(namespace, name)}`, { cause: err });
    return new DriverError('driver_unavailable', `driver ${this.id}: ${what} ${sandboxKey(namespace, name)} failed: ${GrpcStatus[err.code]} ${err.details}`, { cause: err });
  }

  private async run(sink: DriverSink): Promise<void> {
    let attempt = 0;
    while (!this.stopped) {
      const synced = await this.watchOnce(sink);
      if (this.stopped) return;
      attempt = synced ? 0 : attempt + 1;
      await this.sleep(backoffDelay(attempt, this.opts.backoff, this.opts.random));
    }
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      this.wake = resolve;
      this.timer = setTimeout(resolve, ms);
    });
  }

  /** Runs one stream to its end; resolves whether it got as far as `synced`. */
  private watchOnce(sink: DriverSink): Promise<boolean> {
    const call = this.client!.WatchSandboxes({ gateway_id: this.opts.gatewayId, accepts_batches: true });
    this.call = call;
    this.streams++;
    const st: StreamState = { synced: false, listing: [] };
    return new Promise((resolve) => {
      let status: StatusObject | undefined;
      let ended = false;
      const finish = (): void => {
        if (status === undefined || !ended) return;
        if (this.call === call) this.call = undefined;
        if (!this.stopped) {
          const why = status.code === GrpcStatus.OK ? 'the driver ended the watch stream' : `${GrpcStatus[status.code]} ${status.details}`;
          sink.error(new DriverError('driver_unavailable', `driver ${this.id} at ${this.opts.address}: ${why}; reconnecting`));
        }
        resolve(st.synced);
      };
      call.on('data', (ev: WireWatchEvent) => {
        if (this.stopped) return;
        try {
          this.handle(sink, st, ev);
        } catch (err) {
          // The sink belongs to the gateway; a throw there must not take the stream (or the process) down.
          sink.error(err instanceof Error ? err : new Error(String(err)));
        }
      });
      // The status event carries the same information; an 'error' listener keeps it from being thrown.
      call.on('error', () => undefined);
      call.on('status', (s: StatusObject) => {
        status = s;
        finish();
      });
      const onEnd = (): void => {
        ended = true;
        finish();
      };
      call.on('end', onEnd);
      call.on('close', onEnd);
    });
  }

  /** Reports a message (or a batch's event) that breaks the contract; it is dropped. A method, not a closure made per event. */
  private invalid(sink: DriverSink, inBatch: boolean, message: string, cause?: unknown): void {
    sink.error(new DriverError('driver_message_invalid', `driver ${this.id}: ${message}; ${inBatch ? 'event' : 'message'} dropped`, { cause, field: (cause as DriverError | undefined)?.field }));
  }

  private handle(sink: DriverSink, st: StreamState, ev: WireWatchEvent, inBatch = false): void {
    switch (ev.event) {
      case 'batch':
        if (inBatch) return this.invalid(sink, inBatch, 'a batch inside a batch');
        // In order, each as if it came alone: one invalid event is dropped, the others apply.
        for (const e of ev.batch?.events ?? []) this.handle(sink, st, e, true);
        return;
      case 'snapshot':
        if (st.synced) return this.invalid(sink, inBatch, 'snapshot after synced (use upserted)');
        try {
          st.listing.push(snapshotFromWire(ev.snapshot, 'snapshot.'));
        } catch (err) {
          return this.invalid(sink, inBatch, (err as Error).message, err);
        }
        return;
      case 'synced':
        if (st.synced) return this.invalid(sink, inBatch, 'a second synced on one stream');
        st.synced = true;
        sink.replace(st.listing);
        st.listing = [];
        return;
      case 'upserted':
      case 'deleted': {
        if (!st.synced) return this.invalid(sink, inBatch, `${ev.event} before synced (the initial list uses snapshot)`);
        let event;
        try {
          event = ev.event === 'upserted' ? { type: 'upsert' as const, snapshot: snapshotFromWire(ev.upserted, 'upserted.') } : deletionFromWire(ev.deleted, 'deleted.');
        } catch (err) {
          return this.invalid(sink, inBatch, (err as Error).message, err);
        }
        sink.apply(event);
        return;
      }
      default:
        return this.invalid(sink, inBatch, 'a WatchEvent with no event set');
    }
  }
}

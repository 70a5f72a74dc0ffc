import { pathToFileURL } from 'node:url';
import {
  Server,
  ServerCredentials,
  status as GrpcStatus,
  type sendUnaryData,
  type ServerUnaryCall,
  type ServerWritableStream,
} from '@grpc/grpc-js';
import type { BackendSnapshot } from '../../src/domain/sandbox.js';
import { sandboxDriverService, type WireActivityReport, type WireSandboxRef, type WireWatchEvent, type WireWatchRequest, type WireSandbox } from '../../src/drivers/grpc/driver-proto.js';
import { deletionToWire, snapshotToWire } from '../../src/drivers/grpc/sandbox-codec.js';
import { LABEL_NAME, LABEL_NAMESPACE, LABEL_SUPERVISOR, STYLE_MAPPINGS, STYLES, type Style, type StyleMapping, type StyleRecords } from './styles.js';

/**
 * A tiny remote driver: serves proto/sandgate/driver/v1/driver.proto from an in-memory set of native
 * records of one backend style (styles.ts), the way a driver beside Docker, Podman, a VM manager or a
 * Kubernetes controller would. Tests import it and drive it through set()/delete(); it also runs alone:
 *
 *   node dist/examples/driver/example-driver.js --port 7000 --style docker
 *   sandgate serve --driver grpc://127.0.0.1:7000?name=docker
 */

export interface ExampleDriverOptions<S extends Style> {
  readonly style: S;
  readonly host?: string;
  /** 0 picks a free port. */
  readonly port?: number;
  readonly protoDir?: string;
}

interface Held<R> {
  readonly record: R;
  readonly snapshot: BackendSnapshot;
}


/** Events per message of the initial list when the gateway accepts batches (driver.proto `EventBatch`). */
const LIST_BATCH = 500;
export class ExampleDriver<S extends Style> {
  readonly style: S;
  /** ActivityReport messages received, in order (the driver only records them). */
  readonly activityReports: WireActivityReport[] = [];
  /** Resume calls received, in order (also for sandboxes it does not know). */
  readonly resumeCalls: { namespace: string; name: string }[] = [];
  private readonly mapping: StyleMapping<StyleRecords[S]>;
  private readonly held = new Map<string, Held<StyleRecords[S]>>();
  private readonly watches = new Set<ServerWritableStream<WireWatchRequest, WireWatchEvent>>();
  private readonly host: string;
  private readonly protoDir: string | undefined;
  private server: Server | undefined;
  private boundPort: number;
  /**
   * Versions start from the wall clock so that a restarted driver never counts below what a gateway
   * already holds: the gateway orders decimal versions and drops older ones (driver.proto).
   */
  private version = Date.now() * 1000;

  private constructor(opts: ExampleDriverOptions<S>) {
    this.style = opts.style;
    this.mapping = STYLE_MAPPINGS[opts.style] as StyleMapping<StyleRecords[S]>;
    this.host = opts.host ?? '127.0.0.1';
    this.boundPort = opts.port ?? 0;
    this.protoDir = opts.protoDir;
  }

  static async start<S extends Style>(opts: ExampleDriverOptions<S>): Promise<ExampleDriver<S>> {
    const d = new ExampleDriver(opts);
    await d.listen();
    return d;
  }

  get port(): number {
    return this.boundPort;
  }

  /** `host:port`, for GrpcDriver's `address`. */
  get address(): string {
    return `${this.host.includes(':') ? `[${this.host}]` : this.host}:${this.boundPort}`;
  }

  /** The WatchRequest of every stream opened so far (tests read what the gateway asked for). */
  readonly watchRequests: WireWatchRequest[] = [];

  /** Open WatchSandboxes streams. */
  get watchers(): number {
    return this.watches.size;
  }

  /** Creates or replaces a native record; returns the snapshot it maps to, as sent to watchers. */
  set(record: StyleRecords[S]): BackendSnapshot {
    const snapshot = this.mapping.toSnapshot(record, this.nextVersion());
    this.held.set(snapshot.namespace + '/' + snapshot.name, { record, snapshot });
    this.broadcast({ upserted: snapshotToWire(snapshot) });
    return snapshot;
  }

  /** The native record held for a sandbox. */
  record(namespace: string, name: string): StyleRecords[S] | undefined {
    return this.held.get(namespace + '/' + name)?.record;
  }

  /** Removes a sandbox from the backend; false when it was not there. */
  delete(namespace: string, name: string): boolean {
    const h = this.held.get(namespace + '/' + name);
    if (h === undefined) return false;
    this.held.delete(namespace + '/' + name);
    this.broadcast({ deleted: deletionToWire({ type: 'delete', namespace, name, uid: h.snapshot.uid, resourceVersion: this.nextVersion() }) });
    return true;
  }

  /** Writes a WatchEvent as given to every open stream: tests send malformed messages this way. */
  sendRaw(event: WireWatchEvent): void {
    this.broadcast(event);
  }

  /** A process restart: stop serving (open streams break), run `whileDown`, then serve the same records on the same port. */
  async restart(whileDown?: () => void): Promise<void> {
    await this.close();
    whileDown?.();
    await this.listen();
  }

  /**
   * Stops serving. `kill` (the default) drops connections as a killed process would: the gateway sees its
   * streams fail, not end. `graceful` waits for open calls to finish, so it hangs while a watch is open.
   * Either way it resolves once the listener and every connection are closed and the port is free.
   */
  async close(mode: 'kill' | 'graceful' = 'kill'): Promise<void> {
    const server = this.server;
    if (server === undefined) return;
    this.server = undefined;
    if (mode === 'graceful') {
      await new Promise<void>((resolve) => server.tryShutdown(() => resolve()));
      this.watches.clear();
      return;
    }
    this.watches.clear();
    await new Promise<void>((resolve) => {
      server.tryShutdown(() => resolve());
      server.forceShutdown();
    });
  }

  private nextVersion(): string {
    return String(++this.version);
  }

  private broadcast(event: WireWatchEvent): void {
    for (const w of this.watches) w.write(event);
  }

  private async listen(): Promise<void> {
    const server = new Server();
    server.addService(sandboxDriverService(this.protoDir).service, {
      WatchSandboxes: (call: ServerWritableStream<WireWatchRequest, WireWatchEvent>) => {
        this.watchRequests.push(call.request);
        const list: WireWatchEvent[] = [...this.held.values()].map((h) => ({ snapshot: snapshotToWire(h.snapshot) }));
        list.push({ synced: {} });
        if (call.request.accepts_batches === true) {
          // The initial list in batches: one gRPC message per LIST_BATCH events instead of one each, and
          // each message well under the gateway's 4 MiB receive limit.
          for (let i = 0; i < list.length; i += LIST_BATCH) call.write({ batch: { events: list.slice(i, i + LIST_BATCH) } });
        } else {
          for (const e of list) call.write(e);
        }
        this.watches.add(call);
        const drop = (): void => void this.watches.delete(call);
        call.on('cancelled', drop);
        call.on('close', drop);
        call.on('error', drop);
      },
      Get: (call: ServerUnaryCall<WireSandboxRef, WireSandbox>, cb: sendUnaryData<WireSandbox>) => {
        const h = this.held.get(`${call.request.namespace ?? ''}/${call.request.name ?? ''}`);
        if (h === undefined) return cb({ code: GrpcStatus.NOT_FOUND, details: 'no such sandbox' });
        cb(null, snapshotToWire(h.snapshot));
      },
      Resume: (call: ServerUnaryCall<WireSandboxRef, object>, cb: sendUnaryData<object>) => {
        const namespace = call.request.namespace ?? '';
        const name = call.request.name ?? '';
        this.resumeCalls.push({ namespace, name });
        const h = this.held.get(`${namespace}/${name}`);
        if (h === undefined) return cb({ code: GrpcStatus.NOT_FOUND, details: 'no such sandbox' });
        const resumed = this.mapping.resume(h.record);
        if (resumed !== undefined) this.set(resumed);
        cb(null, {});
      },
      // No Pause: grpc-js answers UNIMPLEMENTED, and the gateway reports idle pause as unsupported here.
      ReportActivity: (call: ServerUnaryCall<WireActivityReport, object>, cb: sendUnaryData<object>) => {
        this.activityReports.push(call.request);
        cb(null, {});
      },
    });
    const host = this.host.includes(':') ? `[${this.host}]` : this.host;
    this.boundPort = await new Promise<number>((resolve, reject) =>
      server.bindAsync(`${host}:${this.boundPort}`, ServerCredentials.createInsecure(), (err, port) => (err ? reject(err) : resolve(port))),
    );
    this.server = server;
  }
}

/** Two demo sandboxes per style for a manual run: one that needs a supervisor, one that does not. */
function demoRecords<S extends Style>(style: S): StyleRecords[S][] {
  const labels = (name: string, supervisor: string): Record<string, string> => ({
    [LABEL_NAMESPACE]: 'demo',
    [LABEL_NAME]: name,
    [LABEL_SUPERVISOR]: supervisor,
  });
  const started = new Date().toISOString();
  const make = (name: string, supervisor: 'none' | 'required'): StyleRecords[Style] => {
    switch (style) {
      case 'docker':
        return { Id: `docker-${name}`, Name: '/' + name, Config: { Labels: labels(name, supervisor) }, State: { Status: 'running', ExitCode: 0, Error: '', StartedAt: started }, NetworkSettings: { IPAddress: '127.0.0.1' } };
      case 'podman':
        return { Id: `podman-${name}`, Name: name, Config: { Labels: labels(name, supervisor) }, State: { Status: 'running', ExitCode: 0, OOMKilled: false, StartedAt: started }, NetworkSettings: { IPAddress: '127.0.0.1' } };
      case 'vm':
        return { vm_id: `vm-${name}`, boot_id: started, state: 'Running', destroying: false, guest_agent: { ready: true }, network: { tap_ip: '127.0.0.1' }, metadata: { namespace: 'demo', name, supervisor } };
      default:
        return {
          metadata: { namespace: 'demo', name, uid: `k8s-${name}`, annotations: { [LABEL_SUPERVISOR]: supervisor } },
          spec: { replicas: 1 },
          status: { conditions: [{ type: 'Ready', status: 'True', reason: 'DependenciesReady' }], podIPs: ['127.0.0.1'], podUID: `pod-${name}` },
        };
    }
  };
  return [make('web', 'none'), make('agent', 'required')] as StyleRecords[S][];
}

function parseArgs(argv: readonly string[]): { port: number; style: Style; host: string } {
  const out = { port: 7000, style: 'docker' as Style, host: '127.0.0.1' };
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1]];
    if (value === undefined) throw new Error(`${flag} needs a value`);
    if (flag === '--port' && /^\d+$/.test(value) && Number(value) <= 65535) out.port = Number(value);
    else if (flag === '--style' && (STYLES as readonly string[]).includes(value)) out.style = value as Style;
    else if (flag === '--host') out.host = value;
    else throw new Error(`bad argument ${flag} ${value}; usage: --port N --style ${STYLES.join('|')} [--host H]`);
  }
  return out;
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const d = await ExampleDriver.start({ style: args.style, host: args.host, port: args.port });
  for (const r of demoRecords(args.style)) d.set(r);
  console.log(`example ${args.style} driver listening on ${d.address}`);
  const stop = (): void => void d.close().then(() => process.exit(0));
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  main().catch((err: unknown) => {
    console.error(err instanceof Error ? err.message : err);
    process.exit(1);
  });
}

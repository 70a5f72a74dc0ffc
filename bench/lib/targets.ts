import { execFileSync } from 'node:child_process';
import { pathToFileURL } from 'node:url';
import { benchScript, CLI } from './machine.js';
import { processCpuMicros } from './proc-stat.js';
import { freePort, sleep, type Child, type ProcessGroup } from './processes.js';

export interface TargetOptions {
  readonly profileDir?: string | undefined;
}

export class Target {
  constructor(
    readonly child: Child,
    readonly ports: Readonly<Record<string, number>>,
  ) {}

  get name(): string {
    return this.child.name;
  }

  get grpcTarget(): string {
    return '127.0.0.1:' + this.port('grpc');
  }

  get adminUrl(): string {
    return 'http://127.0.0.1:' + this.port('admin');
  }

  get supervisorUrl(): string {
    return 'ws://127.0.0.1:' + this.port('supervisor');
  }

  /** A listener by its flag's name (`proxy` for `--proxy-port`). */
  url(port: string, scheme = 'http'): string {
    return `${scheme}://127.0.0.1:${this.port(port)}`;
  }

  port(name: string): number {
    const p = this.ports[name];
    if (p === undefined) throw new Error(`${this.name} has no ${name} port`);
    return p;
  }

  heap(): Promise<NodeJS.MemoryUsage> {
    return this.child.request<NodeJS.MemoryUsage>('heap', {}, 60_000);
  }

  get pid(): number {
    const pid = this.child.proc.pid;
    if (pid === undefined) throw new Error(`${this.name} has no process`);
    return pid;
  }

  /** Read from /proc: it costs the process nothing and works for nginx too. */
  cpuMicrosNow(): number {
    const us = processCpuMicros(this.pid);
    if (us === undefined) throw new Error(`${this.name} is not running`);
    return us;
  }

  stop(): Promise<void> {
    return this.child.stop('SIGTERM');
  }
}

export class TargetStartError extends Error {
  constructor(
    readonly target: string,
    readonly reason: string,
  ) {
    super(`${target} did not start: ${reason}`);
  }
}

let profiles = 0;

/** The V8 flags of the Dockerfile and `npm start` (a test keeps them in step). */
export const GATEWAY_NODE_FLAGS = ['--min-semi-space-size=64', '--max-semi-space-size=64', '--no-allocation-site-pretenuring', '--heap-growing-percent=100'] as const;

function nodeFlags(name: string, opts: TargetOptions): string[] {
  // Every Node process under test, baselines too, runs with the gateway's flags, so a comparison is of
  // code, not of heap settings. --no-memory-reducer: V8's few full GCs some seconds after start-up would
  // land in one block of a comparison.
  const flags = [...GATEWAY_NODE_FLAGS, '--expose-gc', '--no-memory-reducer', '--import', pathToFileURL(benchScript('lib/heap-probe.js')).href];
  if (opts.profileDir !== undefined) flags.push('--cpu-prof', '--cpu-prof-dir', opts.profileDir, '--cpu-prof-name', `${++profiles}-${name}.cpuprofile`);
  return flags;
}

export interface GatewaySpec {
  readonly name: string;
  readonly sandboxes?: string;
  readonly drivers?: readonly string[];
  /** The proxy's TLS listener is opened too. */
  readonly tls?: { readonly certFile: string; readonly keyFile: string };
  readonly args?: readonly string[];
  /** Publishes its supervisor endpoint's URL with its presence lease (`--supervisor-public-url`), so peers can move sessions to it. */
  readonly publicSupervisorUrl?: boolean;
  readonly readyTimeoutMs?: number;
  readonly env?: Readonly<Record<string, string>>;
}

let knownFlags: ReadonlySet<string> | undefined;

/** The flags this build of the CLI accepts (from `sandgate config --markdown`), so listeners added later get ports too. */
function cliFlags(): ReadonlySet<string> {
  knownFlags ??= new Set(execFileSync(process.execPath, [CLI, 'config', '--markdown'], { encoding: 'utf8' }).match(/`--[a-z0-9-]+`/g)?.map((f) => f.slice(1, -1)));
  return knownFlags;
}

/** `sandgate serve` on loopback, ready once /readyz answers 200 (every driver synced). */
export async function startGateway(group: ProcessGroup, spec: GatewaySpec, opts: TargetOptions = {}): Promise<Target> {
  // Every listener gets a free port (listeners added to the CLI later too), so two gateways of one section
  // never collide on a default. `--default-port` is the sandbox port of a route, not a listener; the ops
  // port stays off, so /metrics and the sandbox API stay on the admin port; TLS and HTTPS-redirect ports
  // stay off unless the spec brings certificates (they would turn the proxy port away).
  const ports: Record<string, number> = {};
  for (const flag of cliFlags()) {
    const m = /^--([a-z-]+)-port$/.exec(flag);
    if (m !== null && flag !== '--default-port' && flag !== '--ops-port' && !/tls|https/.test(m[1]!)) ports[m[1]!] = await freePort();
  }
  if (spec.tls !== undefined) ports['proxy-tls'] = await freePort();
  const args = ['serve', '--listen-host', '127.0.0.1', ...Object.entries(ports).flatMap(([name, port]) => [`--${name}-port`, String(port)])];
  args.push('--log-level', 'warn', '--demo', 'off', '--shutdown-timeout-ms', '3000');
  if (spec.sandboxes !== undefined) args.push('--sandboxes', spec.sandboxes);
  if (spec.drivers !== undefined) args.push('--drivers', spec.drivers.join(','));
  if (spec.tls !== undefined) args.push('--tls-cert-file', spec.tls.certFile, '--tls-key-file', spec.tls.keyFile);
  if (spec.publicSupervisorUrl === true && ports.supervisor !== undefined) args.push('--supervisor-public-url', `ws://127.0.0.1:${ports.supervisor}`);
  args.push(...(spec.args ?? []));
  // SANDGATE_* and OTEL_* variables of the shell running the bench would change what is measured.
  const env = { ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('SANDGATE_') && !k.startsWith('OTEL_'))), ...spec.env };
  const child = group.node(spec.name, CLI, args, { execArgv: nodeFlags(spec.name, opts), env });
  const timeoutMs = spec.readyTimeoutMs ?? 60_000;
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    // The CLI reports a refused start as `sandgate: <code>: <message>`; a process that printed it is done
    // even if some listener it opened keeps it from exiting.
    const refused = child.tail.find((l) => l.startsWith('sandgate:'));
    if (!child.running || refused !== undefined) {
      await child.stop('SIGKILL');
      throw new TargetStartError(spec.name, (refused ?? child.tail.at(-1) ?? 'exited without a message').replace(/^sandgate:\s*/, ''));
    }
    const res = await fetch(`http://127.0.0.1:${ports.admin}/readyz`, { signal: AbortSignal.timeout(2000) }).catch(() => undefined);
    await res?.arrayBuffer();
    if (res?.status === 200) return new Target(child, ports);
    await sleep(50);
  }
  await child.stop('SIGKILL');
  throw new TargetStartError(spec.name, `not ready within ${timeoutMs} ms:\n${child.tailText()}`);
}

export async function startBare(group: ProcessGroup, name: string, script: string, opts: TargetOptions = {}, args: readonly string[] = []): Promise<Target> {
  const port = await freePort();
  const child = group.node(name, benchScript(script), [String(port), ...args], { execArgv: nodeFlags(name, opts) });
  const bound = Number((await child.ready()).port);
  return new Target(child, { grpc: bound, admin: bound, main: bound });
}

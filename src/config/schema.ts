/**
 * The one configuration schema. Every option has a type, a default, a flag (`--kebab-case`), an
 * environment variable (`SANDGATE_UPPER_SNAKE`) and a description; docs/configuration.md is generated
 * from this table (`sandgate config --markdown`) and a test keeps it in step.
 */

type Kind = 'string' | 'int' | 'bool' | 'list' | 'enum';

interface BaseSpec<K extends Kind, T> {
  readonly kind: K;
  readonly default: T;
  readonly description: string;
  /** Redacted when the resolved configuration is logged. */
  readonly secret?: boolean;
}

export type OptionSpec =
  | BaseSpec<'string', string>
  | (BaseSpec<'int', number> & { readonly min: number; readonly max: number })
  | BaseSpec<'bool', boolean>
  | (BaseSpec<'list', readonly string[]> & { readonly values?: readonly string[] })
  | (BaseSpec<'enum', string> & { readonly values: readonly string[] });

const port = (def: number, description: string) => ({ kind: 'int', default: def, min: 0, max: 65535, description }) as const;

export const SCHEMA = {
  config: { kind: 'string', default: '', description: 'Optional configuration file (YAML or JSON) with any of these options.' },
  listenHost: { kind: 'string', default: '0.0.0.0', description: 'Address every listener binds.' },
  grpcPort: port(9001, 'Envoy ext_authz, ext_proc and gRPC health, on one port (0 = any free port).'),
  adminPort: port(9090, 'HTTP authz (/authz/…), the sandbox API, /healthz, /readyz and /metrics (0 = any free port).'),
  sandboxes: { kind: 'string', default: '', description: 'File driver: a YAML or JSON file of sandboxes, reloaded when it changes.' },
  demo: {
    kind: 'enum',
    default: 'auto',
    values: ['auto', 'on', 'off'],
    description: 'Demo mode: bundled example sandboxes with tiny upstreams on 127.0.0.x. `auto` runs it when no driver is configured.',
  },
  baseDomain: { kind: 'string', default: 'localhost', description: 'Sandbox hosts are `<port>-<name>.<namespace>.<base-domain>` and `<port>-<id>.<base-domain>`.' },
  routeOrder: {
    kind: 'list',
    default: ['headers', 'e2b-headers', 'host', 'path'],
    values: ['headers', 'e2b-headers', 'host', 'path'],
    description: 'Route-key sources, tried in this order; the first one present in a request decides.',
  },
  defaultNamespace: { kind: 'string', default: 'default', description: 'Namespace when x-sandbox-namespace is absent.' },
  defaultPort: { kind: 'int', default: 49983, min: 1, max: 65535, description: 'Port when x-sandbox-port / e2b-sandbox-port is absent (49983: the E2B in-sandbox daemon).' },
  pathPrefix: { kind: 'string', default: '', description: 'Path routing `/<prefix>/<namespace>/<name>/<port>/<rest>`; empty turns it off.' },
  upstreamHeader: { kind: 'string', default: 'x-sandgate-upstream', description: 'Header carrying the decided upstream `<address>:<port>` to Envoy (ORIGINAL_DST).' },
  readinessWaitMs: {
    kind: 'int',
    default: 15_000,
    min: 0,
    max: 300_000,
    description: 'How long a request for a sandbox in a readiness gap waits for it to become Ready (0 = answer at once).',
  },
  waitersPerSandbox: { kind: 'int', default: 1000, min: 0, max: 1_000_000, description: 'Requests allowed to wait for one sandbox at once; more get 503 at once.' },
  waitersTotal: { kind: 'int', default: 10_000, min: 0, max: 10_000_000, description: 'Requests allowed to wait across all sandboxes at once.' },
  tombstoneTtlMs: { kind: 'int', default: 600_000, min: 0, max: 86_400_000, description: 'How long a deleted sandbox uid stays fenced against late updates.' },
  gatewayId: { kind: 'string', default: '', description: 'Name of this gateway replica (default: hostname-pid).' },
  shutdownTimeoutMs: { kind: 'int', default: 10_000, min: 0, max: 600_000, description: 'Upper bound on graceful shutdown after SIGTERM.' },
  logLevel: {
    kind: 'enum',
    default: 'info',
    values: ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'],
    description: 'Log level (pino).',
  },
} as const satisfies Record<string, OptionSpec>;

export type Schema = typeof SCHEMA;
export type OptionName = keyof Schema;

type ValueOf<S> = S extends { kind: 'int' }
  ? number
  : S extends { kind: 'bool' }
    ? boolean
    : S extends { kind: 'list' }
      ? readonly string[]
      : string;

export type Config = { readonly [K in OptionName]: ValueOf<Schema[K]> };

/** The one defaults object, derived from the schema. */
export const DEFAULTS: Config = Object.freeze(
  Object.fromEntries(Object.entries(SCHEMA).map(([k, spec]) => [k, spec.default])) as unknown as Config,
);

export function flagOf(name: string): string {
  return '--' + name.replace(/[A-Z]/g, (c) => '-' + c.toLowerCase());
}

export function envOf(name: string): string {
  return 'SANDGATE_' + name.replace(/[A-Z]/g, (c) => '_' + c).toUpperCase();
}

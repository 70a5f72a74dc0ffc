import { readFileSync } from 'node:fs';
import { parse as parseYaml } from 'yaml';
import { exactDuration, parseDuration } from '../domain/duration.js';
import { SandgateError } from '../domain/errors.js';
import { isDnsLabel, isDnsName } from '../domain/labels.js';
import { redactRedisOptionsText, redactRedisUrl } from '../lib/redis-connection.js';
import { tracingSettings } from './tracing-settings.js';
import { DEFAULTS, SCHEMA, envOf, flagOf, type Config, type DurationSpec, type OptionName, type OptionSpec } from './schema.js';

/**
 * Resolves the configuration: defaults < config file < SANDGATE_* environment < flags. Every source goes
 * through the same schema; unknown keys and bad values are rejected with a hint; the result is frozen.
 */

const NAMES = Object.keys(SCHEMA) as OptionName[];
const BY_FLAG = new Map(NAMES.map((n) => [flagOf(n), n]));

function distance(a: string, b: string): number {
  const d: number[] = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let prev = d[0]!;
    d[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const tmp = d[j]!;
      d[j] = Math.min(d[j]! + 1, d[j - 1]! + 1, prev + (a[i - 1] === b[j - 1] ? 0 : 1));
      prev = tmp;
    }
  }
  return d[b.length]!;
}

function hint(unknown: string, candidates: readonly string[]): string {
  let best = '';
  let bestD = Infinity;
  for (const c of candidates) {
    const dd = distance(unknown.toLowerCase(), c.toLowerCase());
    if (dd < bestD) {
      bestD = dd;
      best = c;
    }
  }
  return bestD <= Math.max(2, Math.floor(unknown.length / 3)) ? ` (did you mean ${best}?)` : '';
}

function invalid(message: string): SandgateError {
  return new SandgateError('config_invalid', message);
}

function coerce(spec: OptionSpec, raw: unknown, where: string): unknown {
  const bad = (why: string) => invalid(`${where}: ${why}`);
  switch (spec.kind) {
    case 'string':
      if (typeof raw === 'number') return String(raw);
      if (typeof raw !== 'string') throw bad('expected a string');
      return raw;
    case 'int': {
      const n = typeof raw === 'number' ? raw : typeof raw === 'string' && /^-?\d+$/.test(raw.trim()) ? Number(raw.trim()) : NaN;
      if (!Number.isSafeInteger(n)) throw bad('expected a whole number');
      if (n < spec.min || n > spec.max) throw bad(`must be between ${spec.min} and ${spec.max}`);
      return n;
    }
    case 'bool':
      if (typeof raw === 'boolean') return raw;
      if (raw === 'true' || raw === '1' || raw === 'yes') return true;
      if (raw === 'false' || raw === '0' || raw === 'no') return false;
      throw bad('expected true or false');
    case 'enum':
      if (typeof raw !== 'string' || !spec.values.includes(raw)) throw bad(`must be one of ${spec.values.join(', ')}`);
      return raw;
    case 'duration':
      return readDuration(raw, where, spec);
    case 'list': {
      const items = Array.isArray(raw)
        ? raw.map((v) => String(v).trim())
        : typeof raw === 'string'
          ? raw.split(',').map((s) => s.trim()).filter((s) => s.length > 0)
          : undefined;
      if (items === undefined) throw bad('expected a list or a comma-separated string');
      if (spec.values !== undefined) {
        for (const item of items) if (!spec.values.includes(item)) throw bad(`unknown value ${JSON.stringify(item)}${hint(item, spec.values)}; allowed: ${spec.values.join(', ')}`);
      }
      if (new Set(items).size !== items.length) throw bad('lists a value twice');
      return Object.freeze(items);
    }
  }
}

/**
 * A duration option's value in ms: text in the one grammar (src/domain/duration.ts), or a bare number in
 * the option's unit (a YAML or JSON number too), within `min`..`max`. The CLI commands' own duration flags
 * (`--ttl`) go through here as well. Throws `config_invalid` naming `where`.
 */
export function readDuration(raw: unknown, where: string, spec: Pick<DurationSpec, 'unit' | 'min' | 'max'>): number {
  const text = typeof raw === 'number' && Number.isSafeInteger(raw) && raw >= 0 ? String(raw) : typeof raw === 'string' ? raw : undefined;
  if (text === undefined) throw invalid(`${where}: expected a duration such as 30s, 15m or 1h30m`);
  const ms = parseDuration(text, spec.unit === 'ms' ? 1 : 1000);
  if (typeof ms === 'string') throw invalid(`${where}: ${ms}`);
  if (ms < spec.min || ms > spec.max) throw invalid(`${where}: must be between ${exactDuration(spec.min)} and ${exactDuration(spec.max)}`);
  return ms;
}

function kebabToCamel(s: string): string {
  return s.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
}

/** Parses `--flag value`, `--flag=value`, `--flag` / `--no-flag` (booleans). Returns options and positionals. */
export function parseFlags(argv: readonly string[]): { values: Partial<Record<OptionName, unknown>>; positionals: string[] } {
  const values: Partial<Record<OptionName, unknown>> = {};
  const positionals: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (!arg.startsWith('--')) {
      positionals.push(arg);
      continue;
    }
    const eq = arg.indexOf('=');
    const flag = eq < 0 ? arg : arg.slice(0, eq);
    let name = BY_FLAG.get(flag);
    let negated = false;
    if (name === undefined && flag.startsWith('--no-')) {
      name = BY_FLAG.get('--' + flag.slice(5));
      negated = name !== undefined && (SCHEMA[name] as OptionSpec).kind === 'bool';
      if (!negated) name = undefined;
    }
    if (name === undefined) throw invalid(`unknown flag ${flag}${hint(flag, [...BY_FLAG.keys()])}`);
    const spec = SCHEMA[name] as OptionSpec;
    if (spec.kind === 'bool' && eq < 0) {
      values[name] = !negated;
      continue;
    }
    if (eq >= 0) {
      values[name] = arg.slice(eq + 1);
      continue;
    }
    const next = argv[i + 1];
    if (next === undefined) throw invalid(`${flag} needs a value`);
    values[name] = next;
    i++;
  }
  return { values, positionals };
}

function readConfigFile(path: string, read: (p: string) => string): Record<string, unknown> {
  let text: string;
  try {
    text = read(path);
  } catch (err) {
    throw new SandgateError('config_invalid', `cannot read config file ${path}: ${(err as Error).message}`, { cause: err });
  }
  let doc: unknown;
  try {
    doc = path.endsWith('.json') ? JSON.parse(text) : parseYaml(text);
  } catch (err) {
    throw new SandgateError('config_invalid', `config file ${path} does not parse: ${(err as Error).message}`, { cause: err });
  }
  if (doc === null || doc === undefined) return {};
  if (typeof doc !== 'object' || Array.isArray(doc)) throw invalid(`config file ${path} must hold a mapping of options`);
  return doc as Record<string, unknown>;
}

export interface ConfigSources {
  readonly argv?: readonly string[];
  readonly env?: Readonly<Record<string, string | undefined>>;
  /**
   * Values the program itself sets (a `--workers` process's own gateway id, the demo's sandboxes file,
   * tests): the highest layer, above flags, environment and file, so what the program decides is what runs.
   */
  readonly overrides?: Partial<Record<OptionName, unknown>>;
  readonly readFile?: (path: string) => string;
}

/** Resolves and freezes the configuration. Throws SandgateError `config_invalid` with a hint. */
export function resolveConfig(sources: ConfigSources = {}): Config {
  const env = sources.env ?? {};
  const flags = parseFlags(sources.argv ?? []).values;
  const fromEnv: Partial<Record<OptionName, unknown>> = {};
  for (const [key, value] of Object.entries(env)) {
    if (!key.startsWith('SANDGATE_') || value === undefined) continue;
    const name = NAMES.find((n) => envOf(n) === key);
    if (name === undefined) {
      throw invalid(`unknown environment variable ${key}${hint(key, NAMES.map(envOf))}`);
    }
    fromEnv[name] = value;
  }
  // Options named by a standard variable (OTEL_*): an empty value counts as unset and enumerated values
  // are case-insensitive, as the OpenTelemetry specification's environment variables are.
  for (const name of NAMES) {
    const spec: OptionSpec = SCHEMA[name];
    const value = spec.env === undefined ? undefined : env[spec.env]?.trim();
    if (value !== undefined && value !== '') fromEnv[name] = spec.kind === 'string' || spec.kind === 'int' ? value : value.toLowerCase();
  }
  const configPath = (sources.overrides?.config ?? flags.config ?? fromEnv.config) as string | undefined;
  const fromFile: Partial<Record<OptionName, unknown>> = {};
  if (configPath !== undefined && configPath !== '') {
    const doc = readConfigFile(configPath, sources.readFile ?? ((p) => readFileSync(p, 'utf8')));
    for (const [rawKey, value] of Object.entries(doc)) {
      const key = kebabToCamel(rawKey);
      if (!Object.hasOwn(SCHEMA, key) || key === 'config') throw invalid(`unknown key ${JSON.stringify(rawKey)} in ${configPath}${hint(rawKey, NAMES)}`);
      fromFile[key as OptionName] = value;
    }
  }
  const out: Record<string, unknown> = { ...DEFAULTS };
  const layers: [Partial<Record<OptionName, unknown>>, (n: OptionName) => string][] = [
    [fromFile, (n) => `${n} in ${configPath}`],
    [fromEnv, envOf],
    [flags, flagOf],
    [sources.overrides ?? {}, (n) => n],
  ];
  for (const [layer, where] of layers) {
    for (const [name, raw] of Object.entries(layer) as [OptionName, unknown][]) {
      if (!Object.hasOwn(SCHEMA, name)) throw invalid(`unknown option ${name}${hint(name, NAMES)}`);
      out[name] = coerce(SCHEMA[name], raw, where(name));
    }
  }
  validate(out as Config);
  return Object.freeze(out) as Config;
}

function validate(c: Config): void {
  if (!isDnsName(c.baseDomain)) throw invalid(`baseDomain ${JSON.stringify(c.baseDomain)} must be a lower-case DNS name`);
  if (!isDnsLabel(c.defaultNamespace)) throw invalid('defaultNamespace must be a DNS-1123 label');
  if (c.pathPrefix !== '' && !/^[A-Za-z0-9._~-]+$/.test(c.pathPrefix)) throw invalid('pathPrefix must be a single path segment, e.g. "sandbox"');
  if (!/^[a-z0-9-]+$/.test(c.upstreamHeader)) throw invalid('upstreamHeader must be a lower-case header name');
  if (c.routeOrder.length === 0) throw invalid('routeOrder must name at least one source');
  for (const ns of c.apiKeyNamespaces) if (ns !== '*' && !isDnsLabel(ns)) throw invalid(`apiKeyNamespaces: ${JSON.stringify(ns)} is neither * nor a DNS-1123 label`);
  if (!isDnsLabel(c.adminTeam)) throw invalid('adminTeam must be a DNS-1123 label');
  if (c.supervisorPublicUrl !== '' && !/^wss?:\/\/[^\s/?#]+(\/[^\s?#]*)?$/.test(c.supervisorPublicUrl)) throw invalid('supervisorPublicUrl must be a ws:// or wss:// URL with no query');
  for (const h of [c.apiKeyHeader, ...c.trafficTokenHeaders, ...c.stripCredentials, ...c.stripHeaders, ...(c.envdTokenHeader === '' ? [] : [c.envdTokenHeader])]) {
    if (!/^[a-z0-9-]+$/.test(h)) throw invalid(`header name ${JSON.stringify(h)} must be lower-case letters, digits and '-'`);
  }
  tracingSettings(c);
}

/**
 * The resolved configuration for printing (the start-up log line, `sandgate config`): secret options
 * redacted, and passwords inside connection strings (`redis://:pw@…`, the Redis options' `password`).
 */
export function redacted(c: Config): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const name of NAMES) {
    const spec: OptionSpec = SCHEMA[name];
    const v: unknown = c[name];
    if (spec.secret === true && v !== '') out[name] = '[redacted]';
    // Any connection string (Redis URLs, grpc:// driver URLs) may carry a username and password.
    else if (typeof v === 'string') out[name] = redactRedisUrl(v);
    else if (Array.isArray(v)) out[name] = v.map((x: unknown) => (typeof x === 'string' ? redactRedisUrl(x) : x));
    else out[name] = v;
  }
  // The Redis options may carry a password or key material.
  out.presenceRedisOptions = redactRedisOptionsText(c.presenceRedisOptions);
  return out;
}

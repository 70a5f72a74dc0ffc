import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { readDuration, resolveConfig } from '../config/load.js';
import { MAX_DURATION_MS } from '../domain/duration.js';
import { SandgateError } from '../domain/errors.js';
import { isDnsLabel } from '../domain/labels.js';
import { supervisorKeysFromConfig } from '../config/secrets.js';
import { SupervisorClient } from '../sessions/supervisor-client.js';
import { mintSupervisorToken } from '../sessions/supervisor-token.js';
import { sandboxKey } from '../domain/sandbox.js';

/** Takes `--name value` pairs for the given command-specific flags out of argv; the rest is configuration. */
export function takeFlags(argv: readonly string[], names: readonly string[]): { own: Record<string, string>; rest: string[] } {
  const own: Record<string, string> = {};
  const rest: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const eq = arg.indexOf('=');
    const flag = eq < 0 ? arg : arg.slice(0, eq);
    if (!names.includes(flag)) {
      rest.push(arg);
      continue;
    }
    const value = eq >= 0 ? arg.slice(eq + 1) : argv[++i];
    if (value === undefined) throw new SandgateError('config_invalid', `${flag} needs a value`);
    own[flag.slice(2)] = value;
  }
  return { own, rest };
}

/** `sandgate token --namespace NS --name NAME [--ttl 24h]`: mints a supervisor token from the configured secret. */
export async function tokenCommand(argv: readonly string[]): Promise<number> {
  const { own, rest } = takeFlags(argv, ['--namespace', '--name', '--ttl']);
  const config = resolveConfig({ argv: rest, env: process.env });
  const keys = supervisorKeysFromConfig(config);
  if (keys === undefined) throw new SandgateError('config_invalid', 'no supervisor secret: set --supervisor-secret-file or SANDGATE_SUPERVISOR_SECRET');
  const namespace = own.namespace ?? config.defaultNamespace;
  const name = own.name;
  if (name === undefined || !isDnsLabel(name) || !isDnsLabel(namespace)) throw new SandgateError('config_invalid', '--namespace and --name must be DNS-1123 labels (--name is required)');
  const ttl = ttlSeconds(own.ttl ?? '24h');
  process.stdout.write((await mintSupervisorToken(keys, namespace, name, ttl)) + '\n');
  return 0;
}

/** A command's `--ttl` (the one duration grammar; a bare number is seconds) in whole seconds, at least one. */
export function ttlSeconds(text: string): number {
  return Math.floor(readDuration(text, '--ttl', { unit: 's', min: 1000, max: MAX_DURATION_MS }) / 1000);
}

/** The sandbox a token is bound to, read from its `sub` claim (unverified: the gateway verifies). */
export function tokenSubject(token: string): { namespace: string; name: string } {
  const payload = token.split('.')[1];
  let sub: unknown;
  try {
    sub = (JSON.parse(Buffer.from(payload ?? '', 'base64url').toString()) as { sub?: unknown }).sub;
  } catch {
    sub = undefined;
  }
  const [namespace, name] = typeof sub === 'string' ? sub.split('/') : [];
  if (namespace === undefined || name === undefined) throw new SandgateError('config_invalid', 'the token has no <namespace>/<name> subject');
  return { namespace, name };
}

/** Reads a token file (a mounted Secret, a file a sidecar rotates); the token is its trimmed content. */
export function readTokenFile(path: string): string {
  let token: string;
  try {
    token = readFileSync(path, 'utf8').trim();
  } catch (err) {
    throw new SandgateError('config_invalid', `cannot read --token-file ${path}: ${(err as Error).message}`, { cause: err });
  }
  if (token === '') throw new SandgateError('config_invalid', `--token-file ${path} is empty`);
  return token;
}

/** Reads `--ca-file`: PEM certificates, checked here so a typo fails at start, not at every connection. */
function readCaFile(path: string): Buffer {
  let pem: Buffer;
  try {
    pem = readFileSync(path);
  } catch (err) {
    throw new SandgateError('config_invalid', `cannot read --ca-file ${path}: ${(err as Error).message}`, { cause: err });
  }
  try {
    new X509Certificate(pem);
  } catch (err) {
    throw new SandgateError('config_invalid', `--ca-file ${path} holds no PEM certificate`, { cause: err });
  }
  return pem;
}

const SUPERVISOR_USAGE = 'usage: sandgate supervisor --gateway ws://HOST:PORT|wss://HOST:PORT (--token T | --token-file FILE) [--ca-file CA.pem] [--instance-id ID] [--relay-ports 8000,49983]';

/**
 * `sandgate supervisor --gateway ws://HOST:PORT[,ws://…] --token T | --token-file FILE`: the reference
 * supervisor, until SIGTERM. With `--token-file` the file is re-read for every connection, ahead of the
 * token's expiry and on SIGHUP (whatever rotates the file may signal), and a newer token is sent over the
 * session (a `refresh` frame), so the session outlives any one token; with `--token` the session ends
 * when the token expires. `--ca-file` names the CA a `wss://` gateway's certificate must chain to (a
 * private CA; default the system's).
 */
export async function supervisorCommand(argv: readonly string[]): Promise<number> {
  const { own, rest } = takeFlags(argv, ['--gateway', '--token', '--token-file', '--instance-id', '--relay-ports', '--ca-file']);
  if (rest.length > 0) throw new SandgateError('config_invalid', `unknown argument ${rest[0]}; ${SUPERVISOR_USAGE}`);
  let allowPorts: number[] | undefined;
  if (own['relay-ports'] !== undefined) {
    allowPorts = own['relay-ports'].split(',').map((p) => Number(p.trim()));
    if (allowPorts.some((p) => !Number.isInteger(p) || p < 1 || p > 65535)) throw new SandgateError('config_invalid', '--relay-ports must be a comma-separated list of ports 1-65535');
  }
  if (own.token !== undefined && own['token-file'] !== undefined) throw new SandgateError('config_invalid', `--token and --token-file exclude each other; ${SUPERVISOR_USAGE}`);
  const tokenFile = own['token-file'] ?? (own.token === undefined ? process.env.SANDGATE_SUPERVISOR_TOKEN_FILE : undefined);
  const token = tokenFile !== undefined ? readTokenFile(tokenFile) : (own.token ?? process.env.SANDGATE_SUPERVISOR_TOKEN);
  if (own.gateway === undefined || token === undefined) throw new SandgateError('config_invalid', `${SUPERVISOR_USAGE} (or SANDGATE_SUPERVISOR_TOKEN / SANDGATE_SUPERVISOR_TOKEN_FILE)`);
  const { namespace, name } = tokenSubject(token);
  const ca = own['ca-file'] === undefined ? undefined : readCaFile(own['ca-file']);
  const gateways = own.gateway.split(',').map((g) => g.trim()).filter((g) => g !== '');
  const client = new SupervisorClient({
    gateway: gateways,
    // A token file is re-read each time: whatever rotates it (a projected token, a sidecar) renews the session.
    token: tokenFile !== undefined ? () => readTokenFile(tokenFile) : token,
    namespace,
    name,
    instanceId: own['instance-id'] ?? `${hostname()}-${process.pid}`,
    relay: { allowPorts },
    ca,
  });
  const log = (msg: string, extra: object) => console.log(JSON.stringify({ time: new Date().toISOString(), sandbox: sandboxKey(namespace, name), msg, ...extra }));
  client.on('accepted', (e) => log('accepted', e));
  client.on('disconnected', (e) => log('disconnected', e));
  client.on('refreshed', (e) => log('token refreshed', e));
  // A token file that cannot be read at refresh time: the session goes on until its token expires.
  client.on('error', (err: Error) => log('token source failed', { error: err.message }));
  return new Promise<number>((resolve) => {
    client.on('stopped', (e: { code: number }) => {
      log('stopped', e);
      resolve(e.code === 1000 ? 0 : 1);
    });
    process.once('SIGTERM', () => client.stop());
    process.once('SIGINT', () => client.stop());
    process.on('SIGHUP', () => void client.refresh());
    client.start();
  });
}

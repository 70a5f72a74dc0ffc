import { createServer, type AddressInfo, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { resolveConfig } from '../config/load.js';
import { SandgateError } from '../domain/errors.js';
import { isDnsLabel } from '../domain/labels.js';
import { takeFlags } from './supervisor-commands.js';
import { openTunnel, TunnelRefusedError, type TunnelTarget } from './tunnel-client.js';

const USAGE = `usage:
  sandgate tunnel <namespace>/<name> <port> [--gateway http(s)://HOST:PORT] [--api-key KEY | SANDGATE_API_KEY]
                 [--via auto|connect|websocket]
      joins stdin/stdout to a TCP port of the sandbox (ssh -o ProxyCommand='sandgate tunnel team-a/web 22' …);
      auto (the default) uses CONNECT, and the WebSocket tunnel where CONNECT does not pass
  sandgate port-forward <namespace>/<name> [LOCAL:]REMOTE… [--gateway URL] [--api-key KEY] [--via …]
      listens on loopback (LOCAL, or a free port) and opens one tunnel to REMOTE per accepted connection`;

interface Invocation {
  readonly positional: readonly string[];
  readonly open: (t: TunnelTarget) => Promise<Duplex>;
  readonly gateway: URL;
}

/** The positional arguments, and how a tunnel opens, from the flags and the configuration. */
function invocation(argv: readonly string[]): Invocation {
  const positional: string[] = [];
  let i = 0;
  while (i < argv.length && !argv[i]!.startsWith('--')) positional.push(argv[i++]!);
  const { own, rest } = takeFlags(argv.slice(i), ['--gateway', '--api-key', '--via']);
  const config = resolveConfig({ argv: rest, env: process.env });
  const gateway = gatewayUrl(own.gateway ?? `http://127.0.0.1:${config.proxyPort > 0 ? config.proxyPort : 8080}`);
  const credential = own['api-key'] ?? process.env.SANDGATE_API_KEY;
  const via = own.via ?? 'auto';
  if (via !== 'auto' && via !== 'connect' && via !== 'websocket') throw new SandgateError('config_invalid', `--via must be auto, connect or websocket\n${USAGE}`);
  const options = { gateway, baseDomain: config.baseDomain, credential, apiKeyHeader: config.apiKeyHeader };
  return { positional, gateway, open: (t) => openTunnel(t, options, via) };
}

/** `sandgate tunnel <namespace>/<name> <port>` (docs/tunnels.md). */
export async function tunnelCommand(argv: readonly string[]): Promise<number> {
  const { positional, gateway, open } = invocation(argv);
  const [sandbox, portText, extra] = positional;
  if (extra !== undefined) throw new SandgateError('config_invalid', `one sandbox and one port\n${USAGE}`);
  const target = { ...parseSandbox(sandbox), port: parsePortArg(portText) };
  let socket: Duplex;
  try {
    socket = await open(target);
  } catch (err) {
    if (err instanceof TunnelRefusedError) {
      process.stderr.write(`sandgate: ${err.message}\n`);
      return 1;
    }
    throw new SandgateError('invalid_request', `the gateway ${gateway.origin} could not be reached: ${(err as Error).message}`, { cause: err });
  }
  return join(socket);
}

/** stdin to the tunnel, the tunnel to stdout, until the sandbox's side closes. */
function join(socket: Duplex): Promise<number> {
  return new Promise((resolve) => {
    let failed = false;
    socket.on('error', () => (failed = true));
    process.stdin.on('error', () => socket.destroy());
    process.stdin.pipe(socket);
    socket.pipe(process.stdout);
    socket.once('close', () => {
      process.stdin.unpipe(socket);
      process.stdin.pause();
      resolve(failed ? 1 : 0);
    });
  });
}

/**
 * `sandgate port-forward <namespace>/<name> [LOCAL:]REMOTE…`: listens on loopback for each mapping (LOCAL,
 * or a free port when it is left out or 0), prints each address it listens on, and opens one tunnel per
 * accepted connection. Runs until interrupted; a refused tunnel closes its connection and says why.
 */
export async function portForwardCommand(argv: readonly string[]): Promise<number> {
  const { positional, open } = invocation(argv);
  const [sandbox, ...mappings] = positional;
  const { namespace, name } = parseSandbox(sandbox);
  if (mappings.length === 0) throw new SandgateError('config_invalid', `at least one [LOCAL:]REMOTE port\n${USAGE}`);
  const pairs = mappings.map((m) => {
    const [a, b, more] = m.split(':');
    if (more !== undefined) throw new SandgateError('config_invalid', `${JSON.stringify(m)} is not [LOCAL:]REMOTE\n${USAGE}`);
    return b === undefined ? { local: 0, remote: parsePortArg(a) } : { local: a === '0' ? 0 : parsePortArg(a), remote: parsePortArg(b) };
  });
  for (const { local, remote } of pairs) {
    const server = createServer({ noDelay: true }, (client: Socket) => forward(client, open({ namespace, name, port: remote })));
    await new Promise<void>((resolve, reject) => {
      server.once('error', (err) => reject(new SandgateError('listen_failed', `127.0.0.1:${local}: ${err.message}`, { cause: err })));
      server.listen(local, '127.0.0.1', () => resolve());
    });
    process.stdout.write(`Forwarding from 127.0.0.1:${(server.address() as AddressInfo).port} -> ${remote}\n`);
  }
  return new Promise<number>((resolve) => {
    process.once('SIGINT', () => resolve(0));
    process.once('SIGTERM', () => resolve(0));
  });
}

function forward(client: Socket, tunnel: Promise<Duplex>): void {
  client.on('error', () => client.destroy());
  client.pause();
  tunnel.then(
    (up) => {
      if (client.destroyed) return void up.destroy();
      up.on('error', () => client.destroy());
      client.once('close', () => up.destroy());
      up.once('close', () => client.end());
      up.pipe(client);
      client.pipe(up);
      client.resume();
    },
    (err: unknown) => {
      process.stderr.write(`sandgate: ${err instanceof TunnelRefusedError ? err.message : `the gateway could not be reached: ${(err as Error).message}`}\n`);
      client.destroy();
    },
  );
}

function parseSandbox(sandbox: string | undefined): { namespace: string; name: string } {
  const [namespace, name, more] = (sandbox ?? '').split('/');
  if (namespace === undefined || name === undefined || more !== undefined || !isDnsLabel(namespace) || !isDnsLabel(name)) {
    throw new SandgateError('config_invalid', `${JSON.stringify(sandbox ?? '')} is not <namespace>/<name>\n${USAGE}`);
  }
  return { namespace, name };
}

function parsePortArg(text: string | undefined): number {
  const port = Number(text);
  if (text === undefined || !/^[1-9][0-9]{0,4}$/.test(text) || port > 65535) throw new SandgateError('config_invalid', `${JSON.stringify(text ?? '')} is not a port 1-65535\n${USAGE}`);
  return port;
}

function gatewayUrl(raw: string): URL {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new SandgateError('config_invalid', `--gateway ${JSON.stringify(raw)} is not a URL (http://HOST:PORT or https://HOST:PORT)`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new SandgateError('config_invalid', `--gateway must be an http:// or https:// URL, not ${u.protocol}`);
  return u;
}

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
      auto (the default) uses CONNECT, and the WebSocket tunnel where CONNECT does not pass`;

/** `sandgate tunnel <namespace>/<name> <port>` (docs/tunnels.md). */
export async function tunnelCommand(argv: readonly string[]): Promise<number> {
  const positional: string[] = [];
  let i = 0;
  while (i < argv.length && !argv[i]!.startsWith('--')) positional.push(argv[i++]!);
  const { own, rest } = takeFlags(argv.slice(i), ['--gateway', '--api-key', '--via']);
  const config = resolveConfig({ argv: rest, env: process.env });
  const target = parseTarget(positional);
  const gateway = gatewayUrl(own.gateway ?? `http://127.0.0.1:${config.proxyPort > 0 ? config.proxyPort : 8080}`);
  const credential = own['api-key'] ?? process.env.SANDGATE_API_KEY;
  const via = own.via ?? 'auto';
  if (via !== 'auto' && via !== 'connect' && via !== 'websocket') throw new SandgateError('config_invalid', `--via must be auto, connect or websocket\n${USAGE}`);
  let socket: Duplex;
  try {
    socket = await openTunnel(target, { gateway, baseDomain: config.baseDomain, credential, apiKeyHeader: config.apiKeyHeader }, via);
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

function parseTarget(positional: readonly string[]): TunnelTarget {
  const [sandbox, portText, extra] = positional;
  if (sandbox === undefined || portText === undefined || extra !== undefined) throw new SandgateError('config_invalid', `a sandbox and a port are required\n${USAGE}`);
  const [namespace, name, more] = sandbox.split('/');
  if (namespace === undefined || name === undefined || more !== undefined || !isDnsLabel(namespace) || !isDnsLabel(name)) {
    throw new SandgateError('config_invalid', `${JSON.stringify(sandbox)} is not <namespace>/<name>\n${USAGE}`);
  }
  const port = Number(portText);
  if (!/^[1-9][0-9]{0,4}$/.test(portText) || port > 65535) throw new SandgateError('config_invalid', `${JSON.stringify(portText)} is not a port 1-65535\n${USAGE}`);
  return { namespace, name, port };
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

import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { redacted, resolveConfig } from '../config/load.js';
import { packageRoot } from '../lib/package-root.js';
import { configMarkdown } from '../config/docs.js';
import { SandgateError } from '../domain/errors.js';

const USAGE = `sandgate — traffic gateway for AI-agent sandboxes

Usage:
  sandgate serve [options]     run the gateway (no driver configured: the demo)
  sandgate token --namespace NS --name NAME [--ttl 24h] [options]
                               mint a supervisor token from the configured secret
  sandgate supervisor --gateway ws://HOST:PORT --token T [--instance-id ID]
                               run the reference supervisor
  sandgate keys create --team T | revoke --id ID | list   [--api-keys FILE|redis://…]
                               manage team API keys
  sandgate link --namespace NS --name NAME --port P [--path /p] [--methods GET,HEAD] [--ttl 15m] [--websocket]
                               print a signed URL opening a sandbox port in a browser (docs/links.md)
  sandgate link revoke --id ID [--api-keys FILE|redis://…]
                               revoke a link and its cookies on every gateway
  sandgate tunnel <namespace>/<name> <port> [--gateway URL] [--api-key KEY | SANDGATE_API_KEY]
                               join stdin/stdout to a TCP port of a sandbox (docs/tunnels.md)
  sandgate port-forward <namespace>/<name> [LOCAL:]REMOTE… [--gateway URL] [--api-key KEY]
                               listen on loopback, one tunnel per accepted connection
  sandgate config [options]    print the resolved configuration (--markdown: the option table)
  sandgate version             print the version
  sandgate help                this text

Every option is a flag (--grpc-port 9001), an environment variable (SANDGATE_GRPC_PORT) or a key in
--config FILE. See docs/configuration.md.`;

/** Runs one CLI command; returns the exit code. */
export async function runCli(argv: readonly string[]): Promise<number> {
  const [command, ...rest] = argv;
  try {
    switch (command) {
      // Each command loads only its own modules: `sandgate supervisor` runs in every sandbox and should
      // not pay for the gateway's (Kubernetes client, gRPC, Redis) at start-up.
      case 'serve':
        return await (await import('./serve.js')).serve(rest);
      case 'token':
        return await (await import('./supervisor-commands.js')).tokenCommand(rest);
      case 'supervisor':
        return await (await import('./supervisor-commands.js')).supervisorCommand(rest);
      case 'keys':
        return await (await import('./keys-commands.js')).keysCommand(rest);
      case 'link':
        return await (await import('./link-commands.js')).linkCommand(rest);
      case 'tunnel':
        return await (await import('./tunnel-commands.js')).tunnelCommand(rest);
      case 'port-forward':
        return await (await import('./tunnel-commands.js')).portForwardCommand(rest);
      case 'config': {
        if (rest.includes('--markdown')) {
          process.stdout.write(configMarkdown());
          return 0;
        }
        const c = resolveConfig({ argv: rest, env: process.env });
        process.stdout.write(JSON.stringify(redacted(c), null, 2) + '\n');
        return 0;
      }
      case 'version':
      case '--version': {
        const pkg = JSON.parse(readFileSync(join(packageRoot(), 'package.json'), 'utf8')) as { version: string };
        console.log(pkg.version);
        return 0;
      }
      case undefined:
      case 'help':
      case '--help':
      case '-h':
        console.log(USAGE);
        return command === undefined ? 2 : 0;
      default:
        console.error(`sandgate: unknown command ${JSON.stringify(command)}\n\n${USAGE}`);
        return 2;
    }
  } catch (err) {
    // One sentence for the operator; the stack only when asked for (--log-level debug).
    const known = err instanceof SandgateError;
    console.error(`sandgate: ${known ? err.code : 'internal_error'}: ${(err as Error | undefined)?.message ?? String(err)}`);
    if (debugRequested(rest)) {
      const cause = known ? err.cause : err;
      if (cause instanceof Error && cause.stack !== undefined) console.error(cause.stack);
    }
    return known ? 2 : 1;
  }
}

/** `--log-level debug|trace` on the command line or in SANDGATE_LOG_LEVEL (read raw: the configuration may be what failed). */
function debugRequested(argv: readonly string[]): boolean {
  let level = process.env.SANDGATE_LOG_LEVEL;
  argv.forEach((a, i) => {
    if (a === '--log-level') level = argv[i + 1];
    else if (a.startsWith('--log-level=')) level = a.slice('--log-level='.length);
  });
  return level === 'debug' || level === 'trace';
}

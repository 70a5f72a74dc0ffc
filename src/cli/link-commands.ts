import { resolveConfig } from '../config/load.js';
import { apiKeyStoreFromConfig, linkMaxTtlFromConfig } from '../config/factories.js';
import { EVERY_NAMESPACE, revokeLinkIn } from '../auth/link-service.js';
import { SandgateError } from '../domain/errors.js';
import { takeFlags, ttlSeconds } from './supervisor-commands.js';

const USAGE = `usage:
  sandgate link --namespace NS --name NAME --port P [--path /prefix] [--methods GET,HEAD] [--ttl 15m] [--websocket]
                [--api-url http://127.0.0.1:9090] [--api-key KEY | SANDGATE_API_KEY]
      prints a signed URL for that sandbox port (minted by the gateway's operator API)
  sandgate link revoke --id ID [--api-keys FILE|redis://…]
      revokes the link and every cookie it set, on every gateway sharing the store`;

/** `sandgate link …` and `sandgate link revoke …` (docs/links.md). */
export async function linkCommand(argv: readonly string[]): Promise<number> {
  // SANDGATE_API_KEY is this command's own variable, not a gateway option: the configuration never sees it.
  const { SANDGATE_API_KEY: envKey, ...env } = process.env;
  if (argv[0] === 'revoke') return revoke(argv.slice(1), env);
  const websocket = argv.includes('--websocket');
  const { own, rest } = takeFlags(
    argv.filter((a) => a !== '--websocket'),
    ['--namespace', '--name', '--port', '--path', '--methods', '--ttl', '--api-url', '--api-key'],
  );
  const config = resolveConfig({ argv: rest, env });
  if (own.name === undefined || own.port === undefined) throw new SandgateError('config_invalid', `--name and --port are required\n${USAGE}`);
  const namespace = own.namespace ?? config.defaultNamespace;
  const port = Number(own.port);
  const body = {
    port,
    path: own.path,
    methods: own.methods?.split(',').map((m) => m.trim().toUpperCase()),
    ttlSeconds: own.ttl === undefined ? undefined : ttlSeconds(own.ttl),
    websocket,
  };
  const api = own['api-url'] ?? `http://127.0.0.1:${config.opsPort >= 0 ? config.opsPort : config.adminPort}`;
  const key = own['api-key'] ?? envKey;
  const res = await fetch(`${api}/v1/sandboxes/${encodeURIComponent(namespace)}/${encodeURIComponent(own.name)}/links`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key === undefined ? {} : { [config.apiKeyHeader]: key }) },
    body: JSON.stringify(body),
  });
  const answer = (await res.json()) as { url?: string; expiresAt?: string; id?: string; code?: string; message?: string };
  if (res.status === 401 && answer.code === 'api_key_required' && key === undefined) {
    throw new SandgateError('invalid_request', `api_key_required: namespace ${namespace} requires an API key, and none was given: pass --api-key KEY or set SANDGATE_API_KEY`);
  }
  if (res.status !== 201) throw new SandgateError('invalid_request', `${answer.code ?? res.status}: ${answer.message ?? 'the gateway refused the link'}`);
  process.stdout.write(`${answer.url}\n`);
  process.stderr.write(`id ${answer.id}, expires ${answer.expiresAt}\n`);
  return 0;
}

async function revoke(argv: readonly string[], env: NodeJS.ProcessEnv): Promise<number> {
  const { own, rest } = takeFlags(argv, ['--id']);
  const config = resolveConfig({ argv: rest, env });
  if (own.id === undefined) throw new SandgateError('config_invalid', `--id is required\n${USAGE}`);
  const store = apiKeyStoreFromConfig(config, () => undefined);
  if (store === undefined) throw new SandgateError('config_invalid', `revoking links needs the gateways' store: set --api-keys FILE|redis://…\n${USAGE}`);
  await store.start();
  try {
    await revokeLinkIn(store, own.id, EVERY_NAMESPACE, { maxTtlSeconds: linkMaxTtlFromConfig(config), perNamespace: config.linkRevocationsPerNamespace });
  } finally {
    await store.close();
  }
  console.log(JSON.stringify({ id: own.id, revoked: true }));
  return 0;
}

import { resolveConfig } from '../config/load.js';
import { SandgateError } from '../domain/errors.js';
import { apiKeyStoreFromConfig } from '../config/factories.js';
import { secretBytes } from '../config/secrets.js';
import { newApiKey } from '../auth/api-keys.js';
import { takeFlags } from './supervisor-commands.js';

const USAGE = `usage:
  sandgate keys create --team TEAM [options]   prints the new key once (store it now: only its hash is kept)
  sandgate keys revoke --id ID [options]       every gateway stops accepting it within a second
  sandgate keys list [options]                 id, team and creation time of every key (never the key)
options: --api-keys FILE|redis://…, --key-pepper-file FILE (or SANDGATE_KEY_PEPPER), and any gateway option`;

/** `sandgate keys create|revoke|list`, against the same --api-keys store the gateways use. */
export async function keysCommand(argv: readonly string[]): Promise<number> {
  const [action, ...rest] = argv;
  const { own, rest: configArgs } = takeFlags(rest, ['--team', '--id']);
  const config = resolveConfig({ argv: configArgs, env: process.env });
  const store = apiKeyStoreFromConfig(config, () => undefined);
  if (store === undefined) throw new SandgateError('config_invalid', `no API key store: set --api-keys FILE|redis://…\n${USAGE}`);
  await store.start();
  try {
    switch (action) {
      case 'create': {
        if (own.team === undefined) throw new SandgateError('config_invalid', `--team is required\n${USAGE}`);
        const pepper = secretBytes(config.keyPepper, config.keyPepperFile, 'key-pepper');
        if (pepper === undefined) throw new SandgateError('config_invalid', 'set --key-pepper-file or SANDGATE_KEY_PEPPER (the gateways must use the same pepper)');
        const { key, record } = newApiKey(pepper, own.team);
        await store.add(record);
        console.log(JSON.stringify({ id: record.id, team: record.team, createdAt: record.createdAt, key }));
        return 0;
      }
      case 'revoke': {
        if (own.id === undefined) throw new SandgateError('config_invalid', `--id is required\n${USAGE}`);
        const removed = await store.revoke(own.id);
        if (!removed) throw new SandgateError('not_found', `no API key with id ${own.id}`);
        console.log(JSON.stringify({ id: own.id, revoked: true }));
        return 0;
      }
      case 'list':
        for (const r of await store.list()) console.log(JSON.stringify({ id: r.id, team: r.team, createdAt: r.createdAt }));
        return 0;
      default:
        throw new SandgateError('config_invalid', USAGE);
    }
  } finally {
    await store.close();
  }
}

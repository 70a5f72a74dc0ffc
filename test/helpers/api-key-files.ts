import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FileApiKeyStore } from '../../src/auth/api-key-file-store.js';
import { newApiKey } from '../../src/auth/api-keys.js';

/**
 * An API key file and a pepper file in a new temp dir, with one key per entry of `teams` (name → the team
 * it is issued to); the names in `revoked` are revoked once added. Returns the files and each name's key.
 */
export async function writeApiKeyFiles<N extends string>(pepper: string, teams: Record<N, string>, revoked: readonly string[] = []): Promise<{ keysFile: string; pepperFile: string; keys: Record<N, string> }> {
  const dir = mkdtempSync(join(tmpdir(), 'sandgate-keys-'));
  const keysFile = join(dir, 'keys.yaml');
  const pepperFile = join(dir, 'pepper');
  writeFileSync(pepperFile, pepper);
  const store = new FileApiKeyStore(keysFile);
  const keys = {} as Record<N, string>;
  for (const name of Object.keys(teams) as N[]) {
    const { key, record } = newApiKey(new TextEncoder().encode(pepper), teams[name]);
    await store.add(record);
    keys[name] = key;
    if (revoked.includes(name)) await store.revoke(record.id);
  }
  return { keysFile, pepperFile, keys };
}

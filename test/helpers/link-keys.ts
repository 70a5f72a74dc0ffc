import { generateKeyPairSync } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { stringify } from 'yaml';
import { parseLinkKeys, type LinkKeySet } from '../../src/auth/link-keys.js';

/** A fresh Ed25519 key pair as PEM (what `openssl genpkey -algorithm ed25519` writes). */
export function ed25519Pem(): { privateKey: string; publicKey: string } {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  return { privateKey: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(), publicKey: publicKey.export({ type: 'spki', format: 'pem' }).toString() };
}

export type KeyEntry = { kid: string; privateKey?: string; publicKey?: string };

export function linkKeysYaml(keys: readonly KeyEntry[]): string {
  return stringify({ keys });
}

export function linkKeySet(keys: readonly KeyEntry[]): LinkKeySet {
  return parseLinkKeys(linkKeysYaml(keys), 'test keys');
}

export async function writeLinkKeys(path: string, keys: readonly KeyEntry[]): Promise<void> {
  await writeFile(path, linkKeysYaml(keys));
}

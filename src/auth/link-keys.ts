import { createPrivateKey, createPublicKey, type KeyObject } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { parse as parseYaml } from 'yaml';
import { SandgateError } from '../domain/errors.js';
import { watchFile, type FileWatch } from '../lib/file-watch.js';

/**
 * Link signing keys (`--link-keys-file`): Ed25519, in the supervisor key file's style — YAML or JSON
 * `keys: [{kid, privateKey?, publicKey?}, …]`, PEM (PKCS#8 private, SPKI public). The first key with a
 * private key signs; every key verifies. A gateway that only verifies (a control plane mints links) needs
 * public keys alone. Removing a key revokes every link it signed, and every cookie those links set.
 */

export interface LinkKeySet {
  /** The key that signs; undefined when the file holds public keys only. */
  readonly signer: { readonly kid: string; readonly privateKey: KeyObject } | undefined;
  /** Every key id → its public key. */
  readonly verifiers: ReadonlyMap<string, KeyObject>;
}

const KID = /^[A-Za-z0-9._-]{1,64}$/;

function ed25519(make: () => KeyObject, where: string, kid: string, what: string): KeyObject {
  let key: KeyObject;
  try {
    key = make();
  } catch {
    // No cause attached: what the parser says may quote the key.
    throw new SandgateError('config_invalid', `${where}: the ${what} of key ${kid} is not a PEM key`);
  }
  if (key.asymmetricKeyType !== 'ed25519') throw new SandgateError('config_invalid', `${where}: key ${kid} must be Ed25519 (links are signed with EdDSA only)`);
  return key;
}

/** Parses a link key file's text. */
export function parseLinkKeys(text: string, where: string): LinkKeySet {
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    throw new SandgateError('config_invalid', `${where} does not parse: ${(err as Error).message.split('\n', 1)[0]}`);
  }
  const list = (doc as { keys?: unknown } | null)?.keys;
  if (!Array.isArray(list) || list.length === 0) throw new SandgateError('config_invalid', `${where} must hold a non-empty "keys" list`);
  let signer: LinkKeySet['signer'];
  const verifiers = new Map<string, KeyObject>();
  list.forEach((k: unknown, i) => {
    const o = (k ?? {}) as { kid?: unknown; privateKey?: unknown; publicKey?: unknown };
    if (typeof o.kid !== 'string' || !KID.test(o.kid)) throw new SandgateError('config_invalid', `${where}: keys[${i}] needs a kid of 1-64 of [A-Za-z0-9._-]`);
    const kid = o.kid;
    if (verifiers.has(kid)) throw new SandgateError('config_invalid', `${where}: key id ${kid} is listed twice`);
    if (typeof o.privateKey !== 'string' && typeof o.publicKey !== 'string') throw new SandgateError('config_invalid', `${where}: key ${kid} needs a privateKey or a publicKey (PEM)`);
    let publicKey: KeyObject | undefined;
    if (typeof o.privateKey === 'string') {
      const privateKey = ed25519(() => createPrivateKey(o.privateKey as string), where, kid, 'privateKey');
      signer ??= { kid, privateKey };
      publicKey = createPublicKey(privateKey);
    }
    if (typeof o.publicKey === 'string') {
      const given = ed25519(() => createPublicKey(o.publicKey as string), where, kid, 'publicKey');
      if (publicKey !== undefined && !given.equals(publicKey)) throw new SandgateError('config_invalid', `${where}: key ${kid}'s publicKey is not its privateKey's`);
      publicKey = given;
    }
    verifiers.set(kid, publicKey!);
  });
  return { signer, verifiers };
}

export async function readLinkKeys(path: string): Promise<LinkKeySet> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new SandgateError('config_invalid', `cannot read --link-keys-file ${path}: ${(err as Error).message}`, { cause: err });
  }
  return parseLinkKeys(text, path);
}

/**
 * The key set of `--link-keys-file`, re-read when the file changes. A file that does not read or parse is
 * reported and the last good set stays: a broken edit must neither open nor close every link at once.
 */
export class LinkKeyFile {
  private keys: LinkKeySet;
  private watcher: FileWatch | undefined;
  private readonly listeners: (() => void)[] = [];

  constructor(
    readonly path: string,
    initial: LinkKeySet,
    private readonly onError: (err: Error) => void,
  ) {
    this.keys = initial;
  }

  get current(): LinkKeySet {
    return this.keys;
  }

  /** Called after every change of the key set. */
  onChange(fn: () => void): void {
    this.listeners.push(fn);
  }

  /** Follows the file; it is re-read once now, so a change since the first read is not lost. */
  async start(): Promise<void> {
    this.watcher = watchFile(this.path, () => void this.reload(), this.onError, 20);
    await this.reload();
  }

  close(): void {
    this.watcher?.close();
  }

  /** Re-reads the file now. */
  async reload(): Promise<void> {
    try {
      this.keys = await readLinkKeys(this.path);
    } catch (err) {
      this.onError(new Error(`${(err as Error).message}; keeping the current link keys`));
      return;
    }
    for (const fn of this.listeners) fn();
  }
}

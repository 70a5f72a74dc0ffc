import { readFile } from 'node:fs/promises';
import { parse as parseYaml } from 'yaml';
import { parseNamespacePolicies, type NamespacePolicies } from '../domain/access-policy.js';
import { SandgateError } from '../domain/errors.js';

/** Reads `--access-policy-file` (namespace default access policies). Throws config_invalid naming what is wrong. */
export async function readAccessPolicies(path: string): Promise<NamespacePolicies> {
  let doc: unknown;
  try {
    doc = parseYaml(await readFile(path, 'utf8'));
  } catch (err) {
    throw new SandgateError('config_invalid', `--access-policy-file ${path} cannot be read: ${(err as Error).message}`, { cause: err });
  }
  return parseNamespacePolicies(doc, '--access-policy-file');
}

import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { SandgateError } from '../domain/errors.js';
import { relaySecretProblem } from '../edge/relay/relay-config.js';
import { parseSupervisorKeys, type SupervisorKeys } from '../sessions/supervisor-token.js';
import type { Config } from './schema.js';

/**
 * Every secret sandgate reads at start-up comes through one reader: an option holding the value, or its
 * `…File` twin holding it in a file (the file wins, surrounding whitespace dropped). What each secret
 * must look like is checked here too, so a bad one stops start-up before anything listens.
 */

export interface SecretText {
  readonly text: string;
  /** Where it came from, for error messages: the file path or the flag. */
  readonly from: string;
}

/** The secret of `--<flag>` / `--<flag>-file`; undefined when neither is set. */
export function readSecret(value: string, file: string, flag: string): SecretText | undefined {
  if (file !== '') {
    let text: string;
    try {
      text = readFileSync(file, 'utf8').trim();
    } catch (err) {
      throw new SandgateError('config_invalid', `cannot read --${flag}-file ${file}: ${(err as Error).message}`, { cause: err });
    }
    return text === '' ? undefined : { text, from: file };
  }
  return value === '' ? undefined : { text: value, from: `--${flag}` };
}

/** A secret of at least `minBytes` bytes, as bytes (HMAC keys); undefined when not set. */
export function secretBytes(value: string, file: string, flag: string, minBytes = 32): Uint8Array | undefined {
  const s = readSecret(value, file, flag);
  if (s === undefined) return undefined;
  const bytes = new TextEncoder().encode(s.text);
  if (bytes.length < minBytes) throw new SandgateError('config_invalid', `the ${flag} (${s.from}) must be at least ${minBytes} bytes`);
  return bytes;
}

/** Supervisor token keys (`--supervisor-secret-file` or `SANDGATE_SUPERVISOR_SECRET`); undefined when neither is set. */
export function supervisorKeysFromConfig(c: Config): SupervisorKeys | undefined {
  const s = readSecret(c.supervisorSecret, c.supervisorSecretFile, 'supervisor-secret');
  if (s === undefined) return undefined;
  return { keys: parseSupervisorKeys(s.text, s.from), audience: c.supervisorAudience };
}

export interface RelaySecret {
  readonly secret: string;
  /** True when no secret was configured and a random one was made (peers cannot use it). */
  readonly generated: boolean;
}

/**
 * `--relay-secret-file` (preferred) or `--relay-secret`. Without either, a random secret for this
 * process's lifetime: its own Envoy doors and embedded proxy still work, but peers cannot forward to it
 * — a multi-gateway deployment must share one.
 */
export function relaySecretFromConfig(c: Pick<Config, 'relaySecret' | 'relaySecretFile'>): RelaySecret {
  const s = readSecret(c.relaySecret, c.relaySecretFile, 'relay-secret');
  if (s === undefined) return { secret: randomBytes(32).toString('base64url'), generated: true };
  const problem = relaySecretProblem(s.text);
  if (problem !== undefined) throw new SandgateError('config_invalid', `the relay secret (${s.from}) ${problem}`);
  return { secret: s.text, generated: false };
}

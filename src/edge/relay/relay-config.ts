import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { SandgateError } from '../../domain/errors.js';

/**
 * The relay settings resolved at start-up: the shared secret and the address this gateway advertises
 * for its relay listener (docs/relay.md, "Configuration").
 */

export const MIN_RELAY_SECRET_BYTES = 32;

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
export function resolveRelaySecret(secret: string, file: string): RelaySecret {
  let value = secret;
  let from = 'relaySecret';
  if (file !== '') {
    try {
      value = readFileSync(file, 'utf8').trim();
    } catch (err) {
      throw new SandgateError('config_invalid', `cannot read relay secret file ${file}: ${(err as Error).message}`, { cause: err });
    }
    from = file;
  }
  if (value === '') return { secret: randomBytes(32).toString('base64url'), generated: true };
  if (Buffer.byteLength(value) < MIN_RELAY_SECRET_BYTES) throw new SandgateError('config_invalid', `the relay secret (${from}) must be at least ${MIN_RELAY_SECRET_BYTES} bytes`);
  // Header values cannot carry control characters or non-ASCII bytes intact.
  if (!/^[\x21-\x7e]+$/.test(value)) throw new SandgateError('config_invalid', `the relay secret (${from}) must be printable ASCII without spaces`);
  return { secret: value, generated: false };
}

/**
 * The `host:port` peers and Envoy use to reach this gateway's relay listener: `configured` when set
 * (checked), else the listen address with the bound port — 127.0.0.1 when listening on every address,
 * which only this host can use.
 */
export function resolveRelayAddress(configured: string, listenHost: string, boundPort: number): string {
  if (configured !== '') {
    const m = /^(\[[0-9a-fA-F:.]+\]|[^:[\]\s]+):([0-9]{1,5})$/.exec(configured);
    const port = m === null ? 0 : Number(m[2]);
    if (m === null || port < 1 || port > 65535) throw new SandgateError('config_invalid', `relayAdvertiseAddress must be <host>:<port> (an IPv6 host in brackets), not ${JSON.stringify(configured)}`);
    return configured;
  }
  const host = listenHost === '0.0.0.0' || listenHost === '::' || listenHost === '' ? '127.0.0.1' : listenHost;
  return (isIP(host) === 6 ? `[${host}]` : host) + ':' + boundPort;
}

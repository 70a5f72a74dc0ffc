import { isIP } from 'node:net';
import { SandgateError } from '../../domain/errors.js';

/**
 * The relay settings checked at start-up: what a shared secret must look like and the address this
 * gateway advertises for its relay listener (docs/relay.md, "Configuration"). The secret itself is read
 * by src/config/secrets.ts.
 */

export const MIN_RELAY_SECRET_BYTES = 32;

/** Why `secret` cannot be a relay secret, or undefined when it can. */
export function relaySecretProblem(secret: string): string | undefined {
  if (Buffer.byteLength(secret) < MIN_RELAY_SECRET_BYTES) return `must be at least ${MIN_RELAY_SECRET_BYTES} bytes`;
  // Header values cannot carry control characters or non-ASCII bytes intact.
  if (!/^[\x21-\x7e]+$/.test(secret)) return 'must be printable ASCII without spaces';
  return undefined;
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

import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

/**
 * The credential a relay hop carries in `x-sandgate-relay-auth` (docs/relay.md, "The bound
 * credential"). The relay secret itself never leaves a gateway: a front door that decides a relay mints
 * `v1.<expiry ms>.<nonce>.<mac>`, where mac = HMAC-SHA256 over the target (`<ns>/<name>:<port>`), the
 * expiry and a per-decision nonce, keyed by a key derived from the secret. Whoever reads it — Envoy, an
 * nginx `auth_request` setup, a client that can call `/authz/` itself — holds at most what the decision
 * already granted: that one target, for `--relay-credential-ttl-ms`. The relay listener recomputes the
 * MAC for the target it is asked to reach and compares in constant time, then checks the expiry.
 */

const VERSION = 'v1';
const MAC_BYTES = 32;
const NONCE = /^[A-Za-z0-9_-]{8,64}$/;
const DIGITS = /^[0-9]{1,15}$/;

export type RelayCredentialCheck = 'ok' | 'invalid' | 'expired';

export class RelayCredentials {
  private readonly key: Buffer;

  /**
   * @param secret the deployment's relay secret (the same on every gateway)
   * @param ttlMs how long a minted credential is accepted; it must cover the hop from the decision to
   *   the relay listener plus the clock skew between gateways
   */
  constructor(
    secret: string,
    readonly ttlMs: number,
    private readonly now: () => number = Date.now,
  ) {
    // A derived key: the secret itself is used for nothing but this derivation.
    this.key = createHmac('sha256', secret).update('sandgate relay credential v1').digest();
  }

  /** A credential for one relay target (`<ns>/<name>:<port>`), valid for `ttlMs` from now. */
  mint(target: string): string {
    const expires = String(this.now() + this.ttlMs);
    const nonce = randomBytes(9).toString('base64url');
    return `${VERSION}.${expires}.${nonce}.${this.mac(target, expires, nonce).toString('base64url')}`;
  }

  /** Checks a presented credential against the target the request asks for. */
  verify(presented: string | string[] | undefined, target: string): RelayCredentialCheck {
    if (typeof presented !== 'string') return 'invalid';
    const parts = presented.split('.');
    if (parts.length !== 4 || parts[0] !== VERSION) return 'invalid';
    const [, expires, nonce, mac] = parts as [string, string, string, string];
    if (!DIGITS.test(expires) || !NONCE.test(nonce)) return 'invalid';
    const given = Buffer.from(mac, 'base64url');
    if (given.length !== MAC_BYTES || given.toString('base64url') !== mac) return 'invalid';
    if (!timingSafeEqual(given, this.mac(target, expires, nonce))) return 'invalid';
    return Number(expires) < this.now() ? 'expired' : 'ok';
  }

  private mac(target: string, expires: string, nonce: string): Buffer {
    return createHmac('sha256', this.key).update(`${target}\n${expires}\n${nonce}`).digest();
  }
}

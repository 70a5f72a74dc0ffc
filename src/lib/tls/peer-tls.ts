import { createSecureContext, type ConnectionOptions, type PeerCertificate } from 'node:tls';
import type { CertificatePair } from './certificate-pair.js';
import { MODERN_CIPHERS } from './certificate-pair.js';
import type { CertificateSet } from './certificate-set.js';

/**
 * The client side of the doors' certificates: how a gateway connects to a peer gateway's relay listener
 * when the relay speaks TLS (`--doors-tls-cert-file`). It presents the doors pair as its client
 * certificate — what the peer's `--doors-client-ca-file` admits — and checks the peer's certificate:
 *
 * - with `--doors-client-ca-file`, against that CA alone, and not against a name: peers are addressed by
 *   the IP their lease publishes (a pod IP), which a certificate shared by every replica does not carry.
 *   Issued by the deployment's private CA is what makes a peer a gateway of this deployment, as it is
 *   for every client the doors admit.
 * - without it, as any HTTPS client does: Node's root CAs, and the advertised host must be one of the
 *   certificate's names.
 *
 * The options follow the set of pairs: a rotated pair is presented from the next connection on.
 */
export class PeerTls {
  private pair: CertificatePair | undefined;
  private current: ConnectionOptions | undefined;

  constructor(private readonly store: CertificateSet) {}

  /** `tls.connect` options for a connection to a peer's relay listener; the same object until the pair changes. */
  options(): ConnectionOptions {
    const pair = this.store.fallback;
    if (pair === this.pair && this.current !== undefined) return this.current;
    const ca = this.store.clientCa;
    const secureContext = createSecureContext({ minVersion: 'TLSv1.2', ciphers: MODERN_CIPHERS, cert: pair.cert, key: pair.key, ca });
    this.pair = pair;
    this.current = ca === undefined ? { secureContext, rejectUnauthorized: true } : { secureContext, rejectUnauthorized: true, checkServerIdentity: chainOnly };
    return this.current;
  }
}

/** The chain was verified against the private CA before this runs; the name is not checked (see above). */
function chainOnly(_host: string, _cert: PeerCertificate): Error | undefined {
  return undefined;
}

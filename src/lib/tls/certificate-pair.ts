import { createPrivateKey, X509Certificate } from 'node:crypto';
import { createSecureContext, type SecureContext } from 'node:tls';

/**
 * One certificate chain and its private key, as a listener serves them: the names its leaf certificate
 * covers (its DNS subject alternative names) and the secure context made from both.
 */

/**
 * TLS 1.3's suites and TLS 1.2's ECDHE suites with AEAD ciphers only (Mozilla's "intermediate" profile
 * without DHE): no CBC, no RSA key exchange, none on HTTP/2's block list (RFC 9113 §9.2.2).
 */
export const MODERN_CIPHERS = [
  'TLS_AES_128_GCM_SHA256',
  'TLS_AES_256_GCM_SHA384',
  'TLS_CHACHA20_POLY1305_SHA256',
  'ECDHE-ECDSA-AES128-GCM-SHA256',
  'ECDHE-RSA-AES128-GCM-SHA256',
  'ECDHE-ECDSA-AES256-GCM-SHA384',
  'ECDHE-RSA-AES256-GCM-SHA384',
  'ECDHE-ECDSA-CHACHA20-POLY1305',
  'ECDHE-RSA-CHACHA20-POLY1305',
].join(':');

/** Every listener that terminates TLS: 1.2 and later only, the modern suites, the server's order. */
export const TLS_DEFAULTS = { minVersion: 'TLSv1.2', ciphers: MODERN_CIPHERS, honorCipherOrder: true } as const;

export interface CertificatePair {
  /** Where it came from: the pair's name in `--tls-dir`, or the certificate file. */
  readonly source: string;
  /** The leaf's DNS names, lower case (`*.example.com` for a wildcard). */
  readonly names: readonly string[];
  /** The leaf's expiry (epoch ms). */
  readonly notAfter: number;
  readonly cert: Buffer;
  readonly key: Buffer;
  readonly context: SecureContext;
}

/**
 * Checks and builds a pair: the chain must parse as PEM certificates, the key as a PEM private key, and the
 * key must be the leaf's. `clientCa`: the CA client certificates are verified against (mutual TLS). Throws an Error saying which of these failed (the caller keeps its last good pair).
 */
export function loadPair(source: string, cert: Buffer, key: Buffer, clientCa?: Buffer): CertificatePair {
  let leaf: X509Certificate;
  try {
    leaf = new X509Certificate(cert);
  } catch (err) {
    throw new Error(`the certificate file holds no PEM certificate (${(err as Error).message})`);
  }
  let privateKey;
  try {
    privateKey = createPrivateKey(key);
  } catch (err) {
    throw new Error(`the key file holds no PEM private key (${(err as Error).message})`);
  }
  if (!leaf.checkPrivateKey(privateKey)) throw new Error(`the private key does not match the certificate`);
  let context: SecureContext;
  try {
    // The client CA goes into every context: the one SNI selects is the one that verifies a client certificate.
    context = createSecureContext({ ...TLS_DEFAULTS, cert, key, ca: clientCa });
  } catch (err) {
    throw new Error(`the pair cannot be served (${(err as Error).message})`);
  }
  return { source, names: dnsNames(leaf), notAfter: Date.parse(leaf.validTo), cert, key, context };
}

/** The leaf's DNS subject alternative names; its subject CN only when it has none (as old certificates do). */
function dnsNames(leaf: X509Certificate): string[] {
  const names: string[] = [];
  for (const entry of (leaf.subjectAltName ?? '').split(',')) {
    const e = entry.trim();
    if (e.startsWith('DNS:')) names.push(e.slice(4).toLowerCase());
  }
  if (names.length > 0) return names;
  const cn = /(?:^|\n)CN=([^\n]+)/.exec(leaf.subject)?.[1];
  return cn === undefined ? [] : [cn.toLowerCase()];
}

/**
 * The pair serving `servername` (an SNI name): the one with the longest SAN that matches it — an exact
 * name, or a wildcard covering its first label (RFC 6125 §6.4.3: `*.example.com` matches
 * `a.example.com`, not `example.com` nor `a.b.example.com`). Among equally long matches an exact name
 * wins, then the earlier pair. Undefined when none matches (the caller serves its default pair).
 */
export function selectPair(pairs: readonly CertificatePair[], servername: string): CertificatePair | undefined {
  const name = servername.toLowerCase().replace(/\.$/, '');
  const dot = name.indexOf('.');
  const wildcard = dot > 0 ? '*' + name.slice(dot) : undefined;
  let best: CertificatePair | undefined;
  let bestScore = -1;
  for (const p of pairs) {
    for (const san of p.names) {
      // Twice the length, plus one for an exact name: longer wins, and exact wins a tie.
      const score = san === name ? 2 * san.length + 1 : san === wildcard ? 2 * san.length : -1;
      if (score > bestScore) {
        best = p;
        bestScore = score;
      }
    }
  }
  return best;
}

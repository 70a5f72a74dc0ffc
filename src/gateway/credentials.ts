import type { ApiAuth } from '../api/api-access.js';
import { ApiKeyAuth, type ApiKeyStore } from '../auth/api-keys.js';
import { LinkKeyFile, readLinkKeys } from '../auth/link-keys.js';
import { LinkService } from '../auth/link-service.js';
import { LinkAuth } from '../auth/link-tokens.js';
import { readJwtIssuers, WorkloadJwtAuth } from '../auth/workload-jwt.js';
import { readAccessPolicies } from '../config/access-policy-file.js';
import type { NamespacePolicies } from '../domain/access-policy.js';
import { apiKeyStoreFromConfig, certificatesFromConfig, keyPolicy, linkMaxTtlFromConfig, routeOptions } from '../config/factories.js';
import type { Config } from '../config/schema.js';
import { relaySecretFromConfig, secretBytes, supervisorKeysFromConfig } from '../config/secrets.js';
import { startFailed } from '../config/start-errors.js';
import type { KeyPolicy } from '../domain/access.js';
import { SandgateError } from '../domain/errors.js';
import { RelayCredentials } from '../edge/relay/relay-credential.js';
import type { ServerTls } from '../lib/http-listen.js';
import type { Lifecycle } from '../lib/lifecycle.js';
import type { CertificateSet, CertificateStore, ReloadEvent } from '../lib/tls/certificate-store.js';
import { PeerTls } from '../lib/tls/peer-tls.js';
import type { Logger } from '../observability/logger.js';
import type { SupervisorKeys } from '../sessions/supervisor-token.js';

/**
 * What the doors, the API and the sessions check or present: API keys, signed links, traffic tokens,
 * supervisor keys, the relay secret and the TLS certificate store. Read (and checked) before anything
 * listens or connects; the stores that watch files or Redis start with the gateway.
 */
export interface Credentials {
  /** Traffic tokens are HMACs of a sandbox id under this secret; undefined when off. */
  readonly tokenSecret: Uint8Array | undefined;
  readonly relayCredentials: RelayCredentials;
  /** True when no relay secret is configured and this process made its own (peers cannot forward to it). */
  readonly relaySecretGenerated: boolean;
  /** Undefined when no supervisor secret is configured (the supervisor endpoint is off). */
  readonly supervisorKeys: SupervisorKeys | undefined;
  /** Undefined when no API key store is configured. */
  readonly keyStore: ApiKeyStore | undefined;
  readonly apiKeys: ApiKeyAuth | undefined;
  readonly policy: KeyPolicy;
  /** How the operator API sees principals: the same keys and policy as the doors (docs/tenancy.md). */
  readonly apiAuth: ApiAuth | undefined;
  /** Signed links: checked by the doors, minted by the API; undefined without `--link-keys-file`. */
  readonly links: { readonly keys: LinkKeyFile; readonly auth: LinkAuth; readonly service: LinkService } | undefined;
  /** Namespace default access policies; undefined without `--access-policy-file` (`keys` everywhere). */
  readonly accessPolicies: NamespacePolicies | undefined;
  /** Workload JWTs; undefined without `--jwt-issuers-file`. */
  readonly jwt: WorkloadJwtAuth | undefined;
}

export interface CredentialOptions {
  /** Supervisor token keys to use instead of the configured secret. */
  readonly supervisorKeys?: SupervisorKeys;
  readonly now: () => number;
}

export async function readCredentials(config: Config, log: Logger, opts: CredentialOptions): Promise<Credentials> {
  const tokenSecret = secretBytes(config.trafficTokenSecret, config.trafficTokenSecretFile, 'traffic-token-secret');
  const supervisorKeys = opts.supervisorKeys ?? supervisorKeysFromConfig(config);
  const relaySecret = relaySecretFromConfig(config);
  const authLog = log.child({ part: 'auth' });
  const keyStore = apiKeyStoreFromConfig(config, (err) => authLog.warn({ err }, 'API key store problem'));
  const pepper = keyStore === undefined ? undefined : secretBytes(config.keyPepper, config.keyPepperFile, 'key-pepper');
  const apiKeys = keyStore === undefined ? undefined : new ApiKeyAuth(keyStore, requirePepper(pepper), config.adminTeam);
  const policy = keyPolicy(config.apiKeyNamespaces);
  if (supervisorKeys === undefined) log.child({ part: 'sessions' }).warn('no supervisor secret configured (--supervisor-secret-file or SANDGATE_SUPERVISOR_SECRET): the supervisor endpoint is off');
  // Signed links: the key file is read now, so a bad one stops start-up; then watched.
  const linkMaxTtl = linkMaxTtlFromConfig(config);
  const linkKeys = config.linkKeysFile === '' ? undefined : new LinkKeyFile(config.linkKeysFile, await readLinkKeys(config.linkKeysFile), (err) => authLog.warn({ err }, 'link keys problem'));
  const links =
    linkKeys === undefined
      ? undefined
      : {
          keys: linkKeys,
          auth: new LinkAuth(() => linkKeys.current, keyStore ?? { isLinkRevoked: () => false }, linkMaxTtl, opts.now),
          service: new LinkService(() => linkKeys.current, keyStore, linkMaxTtl, { maxTtlSeconds: linkMaxTtl, perNamespace: config.linkRevocationsPerNamespace }, { scheme: config.linkScheme, port: config.linkPort, route: routeOptions(config) }, opts.now),
        };
  if (links !== undefined) links.keys.onChange(() => links.auth.keysChanged());
  const accessPolicies = config.accessPolicyFile === '' ? undefined : await readAccessPolicies(config.accessPolicyFile);
  // Each remote JWKS starts its first fetch now, not awaited: an IdP down does not hold the gateway back.
  const jwt = config.jwtIssuersFile === '' ? undefined : new WorkloadJwtAuth(await readJwtIssuers(config.jwtIssuersFile), opts.now);
  return {
    tokenSecret,
    // The secret stays in this process: every relay hop carries a credential bound to one target.
    relayCredentials: new RelayCredentials(relaySecret.secret, config.relayCredentialTtlMs),
    relaySecretGenerated: relaySecret.generated,
    supervisorKeys,
    keyStore,
    apiKeys,
    policy,
    apiAuth: apiKeys === undefined ? undefined : { principal: (key) => apiKeys.principal(key), header: config.apiKeyHeader.toLowerCase(), policy },
    links,
    accessPolicies,
    jwt,
  };
}

function requirePepper(pepper: Uint8Array | undefined): Uint8Array {
  if (pepper === undefined) throw new SandgateError('config_invalid', 'an API key store needs a pepper: set --key-pepper-file or SANDGATE_KEY_PEPPER');
  return pepper;
}

/** Starts the API key store and then the link key file's watch, when configured; they close at shutdown. */
export async function startCredentialStores(life: Lifecycle, credentials: Credentials): Promise<void> {
  const { keyStore, links } = credentials;
  if (keyStore !== undefined) {
    await life.start(
      'API key store',
      () => keyStore.start().catch((err: unknown) => Promise.reject(startFailed('--api-keys', 'the API key store', err))),
      () => keyStore.close(),
    );
  }
  if (links !== undefined) await life.start('link keys', () => links.keys.start(), () => links.keys.close());
}

export interface Certificates {
  /** The one certificate store every TLS listener's pairs come from; undefined when none speaks TLS. */
  readonly store: CertificateStore | undefined;
  /** The supervisor endpoint's TLS; undefined when it speaks plain WebSocket. */
  readonly supervisor: ServerTls | undefined;
  /** The doors' TLS (the gRPC, admin and relay ports, client certificates checked); undefined: plain. */
  readonly doors: ServerTls | undefined;
  /** How this gateway connects to its peers' relay listeners when they speak TLS (the doors pair and CA). */
  readonly relayPeer: PeerTls | undefined;
  /**
   * The ops port: TLS with the doors' pair, no client certificate (kubelet probes cannot present one;
   * the operator API has its API keys).
   */
  readonly ops: ServerTls | undefined;
  /** The proxy's TLS listener; undefined without `--proxy-tls-port` (or without the proxy). */
  readonly proxyTls: { readonly port: number; readonly pairs: CertificateSet } | undefined;
}

/** Loads (and checks) the certificate pairs; `onReload` hears of every later reload. */
export function readCertificates(config: Config, onReload: (e: ReloadEvent) => void): Certificates {
  const certificates = certificatesFromConfig(config, onReload);
  const proxy = certificates?.proxy;
  const doors = certificates?.doors;
  const proxyTls = config.proxy && config.proxyTlsPort >= 0 && proxy !== undefined ? { port: config.proxyTlsPort, pairs: proxy } : undefined;
  if (config.proxy && config.proxyRedirectHttpsPort === 0 && proxyTls === undefined) throw new SandgateError('config_invalid', '--proxy-redirect-https-port 0 redirects to --proxy-tls-port, which is off');
  if (config.proxy && config.proxyPort < 0 && proxyTls === undefined) throw new SandgateError('config_invalid', '--proxy-port -1 turns the plain listener off: set --proxy-tls-port, or --no-proxy');
  return {
    store: certificates?.store,
    supervisor: serverTls(certificates?.supervisor),
    doors: serverTls(doors),
    ops: serverTls(doors, false),
    relayPeer: doors === undefined ? undefined : new PeerTls(doors),
    proxyTls,
  };
}

/** A set of pairs as a listener's TLS (undefined: plain). */
function serverTls(pairs: CertificateSet | undefined, clientAuth = true): ServerTls | undefined {
  return pairs === undefined ? undefined : { options: pairs.serverOptions(clientAuth), attach: (s) => pairs.attach(s) };
}

/** Follows the certificate files from the start; the pairs were loaded (and checked) with the configuration. */
export async function startCertificates(life: Lifecycle, store: CertificateStore | undefined): Promise<void> {
  if (store !== undefined) await life.start('TLS certificates', () => store.start(), () => store.close());
}

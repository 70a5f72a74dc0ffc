import type { ApiKeyStore } from '../auth/api-keys.js';
import { FileApiKeyStore } from '../auth/api-key-file-store.js';
import { RedisApiKeyStore } from '../auth/api-key-redis-store.js';
import type { KeyPolicy } from '../domain/access.js';
import { X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { SandgateError } from '../domain/errors.js';
import type { RouteOptions, RouteSource } from '../domain/route-key.js';
import type { Driver } from '../drivers/driver.js';
import { FileDriver } from '../drivers/file/file-driver.js';
import { GrpcDriver, parseGrpcDriverUrl } from '../drivers/grpc/grpc-driver.js';
import { createKubernetesDrivers } from '../drivers/kubernetes/kubernetes-driver.js';
import type { Logger } from '../observability/logger.js';
import { MemoryPresence } from '../sessions/presence/memory-presence.js';
import type { PresenceStore } from '../sessions/presence/presence-store.js';
import type { GrpcServerLimits } from '../lib/grpc-h2-connection.js';
import type { ConnectionLimits } from '../lib/connection-guard.js';
import type { H2cLimits } from '../edge/forwarding/h2c-pool.js';
import { redisTarget, type RedisConnectionOptions } from '../lib/redis-connection.js';
import { createRedisPresence } from '../sessions/presence/redis-presence.js';
import { CertificateStore, type CertificateSet, type CertificateSetSpec, type CertificateSource, type ReloadEvent } from '../lib/tls/certificate-store.js';
import type { Config } from './schema.js';

/**
 * Configuration → objects: the drivers, the presence store, the API key store and the routing options a
 * resolved configuration names. Building an object opens nothing (Redis clients connect lazily); the
 * gateway's lifecycle starts and stops them.
 */

/** The gRPC port's per-connection bounds (`--grpc-*`). */
export function grpcLimits(c: Config): GrpcServerLimits {
  return {
    maxConcurrentStreams: c.grpcMaxConcurrentStreams,
    maxStreamBufferBytes: c.grpcMaxStreamBufferBytes,
    maxConnectionBufferBytes: c.grpcMaxConnectionBufferBytes,
    handshakeTimeoutMs: c.grpcHandshakeTimeoutMs,
    idleTimeoutMs: c.grpcIdleTimeoutMs,
    goawayGraceMs: c.grpcGoawayGraceMs,
  };
}

/** Every listener's connection cap and first-request timeouts. */
export function connectionLimits(c: Pick<Config, 'maxConnections' | 'tlsHandshakeTimeoutMs' | 'requestHeaderTimeoutMs'>): ConnectionLimits {
  return { maxConnections: c.maxConnections, tlsHandshakeTimeoutMs: c.tlsHandshakeTimeoutMs, requestHeaderTimeoutMs: c.requestHeaderTimeoutMs };
}

/** The embedded proxy's bounds on HTTP/2 sessions to h2c sandbox ports (`--h2c-*`). */
export function h2cLimits(c: Pick<Config, 'h2cMaxSessionsPerUpstream' | 'h2cMaxStreamsPerSession' | 'h2cIdleTimeoutMs'>): H2cLimits {
  return { maxSessionsPerUpstream: c.h2cMaxSessionsPerUpstream, maxStreamsPerSession: c.h2cMaxStreamsPerSession, idleMs: c.h2cIdleTimeoutMs };
}

export function routeOptions(c: Config): RouteOptions {
  return {
    order: c.routeOrder as readonly RouteSource[],
    baseDomain: c.baseDomain,
    e2bAnswers: c.e2bAnswers,
    defaultNamespace: c.defaultNamespace,
    defaultPort: c.defaultPort,
    pathPrefix: c.pathPrefix,
  };
}

export function driversFromConfig(c: Config, gatewayId: string, log?: Logger): Driver[] {
  const drivers: Driver[] = [];
  if (c.sandboxes !== '') drivers.push(new FileDriver(c.sandboxes));
  if (c.kubernetes) {
    drivers.push(
      ...createKubernetesDrivers({
        kubeconfig: c.kubeconfig === '' ? undefined : c.kubeconfig,
        kinds: c.kubeKinds as readonly ('agent-sandbox' | 'openkruise')[],
        namespaces: c.kubeNamespaces,
        defaultSessionModel: c.kubeSessionModel as 'required' | 'none',
        log,
      }),
    );
  }
  for (const url of c.drivers) {
    const { address, name } = parseGrpcDriverUrl(url);
    drivers.push(new GrpcDriver({ name, address, gatewayId }));
  }
  const ids = drivers.map((d) => d.id);
  const dup = ids.find((id, i) => ids.indexOf(id) !== i);
  if (dup !== undefined) throw new SandgateError('config_invalid', `two drivers are both named ${dup}: give each grpc:// driver its own ?name= (--drivers)`);
  return drivers;
}

export function isRedisUrl(s: string): boolean {
  return /^rediss?:\/\//.test(s);
}

export function apiKeyStoreFromConfig(c: Config, onError: (err: Error) => void): ApiKeyStore | undefined {
  if (c.apiKeys === '') return undefined;
  // The same connection options as presence (Sentinel, Cluster, TLS, credentials): one Redis deployment.
  if (isRedisUrl(c.apiKeys)) return new RedisApiKeyStore(redisTarget(c.apiKeys, c.presenceRedisOptions, 'apiKeys'), c.presenceKeyPrefix, 30_000, onError);
  return new FileApiKeyStore(c.apiKeys, onError);
}

/** `--link-max-ttl` in whole seconds (links count their lifetime in seconds). */
export function linkMaxTtlFromConfig(config: Pick<Config, 'linkMaxTtl'>): number {
  return Math.floor(config.linkMaxTtl / 1000);
}

/** `--api-key-namespaces`: `*` grants every namespace. */
export function keyPolicy(namespaces: readonly string[]): KeyPolicy {
  return { all: namespaces.includes('*'), namespaces: new Set(namespaces.filter((n) => n !== '*')) };
}

/** The Redis options of `--presence`, validated (undefined for `memory`). */
export function redisPresenceOptions(c: Config): { url: string; redisOptions: RedisConnectionOptions | undefined } | undefined {
  if (c.presence === 'memory') return undefined;
  const target = redisTarget(c.presence, c.presenceRedisOptions, 'presence (memory or a Redis URL)');
  return { url: target.url, redisOptions: target.options };
}

export function createPresenceStore(c: Config, gatewayId: string, log: Logger, gatewayInfo?: Readonly<Record<string, string>>): PresenceStore {
  const redis = redisPresenceOptions(c);
  if (redis === undefined) return new MemoryPresence(gatewayId, { log });
  return createRedisPresence({
    ...redis,
    gatewayId,
    leaseTtlMs: c.leaseTtlMs,
    rescanMs: c.presenceRescanMs,
    keyPrefix: c.presenceKeyPrefix,
    shards: c.presenceShards,
    gatewayInfo,
    log,
  });
}

/** The sets of pairs each TLS listener serves, all from the one certificate store. */
export interface ConfiguredCertificates {
  readonly store: CertificateStore;
  /** The proxy's TLS port (`--tls-cert-file` + `--tls-key-file`, or `--tls-dir`); undefined: none. */
  readonly proxy: CertificateSet | undefined;
  /** The supervisor endpoint's: its own pair, else the proxy's with `--supervisor-tls`; undefined: `ws://`. */
  readonly supervisor: CertificateSet | undefined;
  /** The doors' and the ops port's (`--doors-tls-cert-file` + key, `--doors-client-ca-file`); undefined: plain. */
  readonly doors: CertificateSet | undefined;
}

/**
 * The one certificate store of the configuration's TLS listeners, loaded now (a pair that does not load
 * is `tls_certificate_invalid`); undefined when no listener terminates TLS.
 */
export function certificatesFromConfig(c: Config, onReload: (e: ReloadEvent) => void): ConfiguredCertificates | undefined {
  const specs: Record<string, CertificateSetSpec> = {};
  const proxy = proxyPairs(c);
  if (proxy !== undefined) specs.proxy = { from: proxy };
  const supervisor = supervisorPairs(c, proxy !== undefined);
  if (supervisor === 'own') specs.supervisor = { from: { certFile: c.supervisorTlsCertFile, keyFile: c.supervisorTlsKeyFile } };
  const doors = doorsPairs(c);
  if (doors !== undefined) specs.doors = doors;
  if (Object.keys(specs).length === 0) return undefined;
  const store = new CertificateStore(specs, { onReload });
  return {
    store,
    proxy: store.has('proxy') ? store.set('proxy') : undefined,
    supervisor: supervisor === 'own' ? store.set('supervisor') : supervisor === 'proxy' ? store.set('proxy') : undefined,
    doors: store.has('doors') ? store.set('doors') : undefined,
  };
}

/** `--tls-cert-file` + `--tls-key-file`, or `--tls-dir`: the proxy's pairs (and the supervisor's with `--supervisor-tls`). */
function proxyPairs(c: Config): CertificateSource | undefined {
  const single = c.tlsCertFile !== '' || c.tlsKeyFile !== '';
  if (single && c.tlsDir !== '') throw new SandgateError('config_invalid', 'set --tls-cert-file/--tls-key-file or --tls-dir, not both');
  if (single && (c.tlsCertFile === '' || c.tlsKeyFile === '')) throw new SandgateError('config_invalid', '--tls-cert-file and --tls-key-file go together');
  if (!single && c.tlsDir === '') {
    if (c.proxy && c.proxyTlsPort >= 0) throw new SandgateError('config_invalid', '--proxy-tls-port needs certificates: set --tls-cert-file and --tls-key-file, or --tls-dir');
    return undefined;
  }
  return single ? { certFile: c.tlsCertFile, keyFile: c.tlsKeyFile } : { dir: c.tlsDir };
}

/** Which pairs the supervisor endpoint serves: its own (`--supervisor-tls-cert-file` + key), the proxy's, or none. */
function supervisorPairs(c: Config, haveProxy: boolean): 'own' | 'proxy' | undefined {
  const own = c.supervisorTlsCertFile !== '' || c.supervisorTlsKeyFile !== '';
  if (own && (c.supervisorTlsCertFile === '' || c.supervisorTlsKeyFile === '')) throw new SandgateError('config_invalid', '--supervisor-tls-cert-file and --supervisor-tls-key-file go together');
  if (own) return 'own';
  if (!c.supervisorTls) return undefined;
  if (!haveProxy) throw new SandgateError('config_invalid', '--supervisor-tls needs certificates: set --tls-cert-file and --tls-key-file (or --tls-dir), or --supervisor-tls-cert-file and --supervisor-tls-key-file');
  return 'proxy';
}

/** The doors' pair (`--doors-tls-cert-file` + key) with `--doors-client-ca-file` for mutual TLS. */
function doorsPairs(c: Config): CertificateSetSpec | undefined {
  const pair = c.doorsTlsCertFile !== '' || c.doorsTlsKeyFile !== '';
  if (pair && (c.doorsTlsCertFile === '' || c.doorsTlsKeyFile === '')) throw new SandgateError('config_invalid', '--doors-tls-cert-file and --doors-tls-key-file go together');
  if (!pair) {
    if (c.doorsClientCaFile !== '') throw new SandgateError('config_invalid', '--doors-client-ca-file needs --doors-tls-cert-file and --doors-tls-key-file');
    return undefined;
  }
  const clientCa = c.doorsClientCaFile === '' ? undefined : readCa(c.doorsClientCaFile, '--doors-client-ca-file');
  return { from: { certFile: c.doorsTlsCertFile, keyFile: c.doorsTlsKeyFile }, clientCa };
}

/** A CA file: read and checked to hold a PEM certificate, so a wrong path fails at start. */
function readCa(path: string, flag: string): Buffer {
  let pem: Buffer;
  try {
    pem = readFileSync(path);
    new X509Certificate(pem);
  } catch (err) {
    throw new SandgateError('config_invalid', `${flag} ${path} is not a readable PEM certificate: ${(err as Error).message}`, { cause: err });
  }
  return pem;
}

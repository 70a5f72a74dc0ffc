import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { configMarkdown } from '../../src/config/docs.js';
import { connectionLimits, h2cLimits } from '../../src/config/factories.js';
import { CONNECTION_LIMITS } from '../../src/lib/connection-guard.js';
import { redacted, resolveConfig } from '../../src/config/load.js';
import { DEFAULT_H2C_LIMITS } from '../../src/edge/forwarding/h2c-pool.js';
import { DEFAULTS } from '../../src/config/schema.js';
import { expectSandgateError } from '../helpers/sandgate-error.js';

const rejects = (fn: () => unknown, pattern: RegExp): unknown => expectSandgateError(fn, 'config_invalid', pattern);

describe('configuration', () => {
  it('has the documented defaults', () => {
    const c = resolveConfig();
    expect(c).toMatchObject({ grpcPort: 9001, adminPort: 9090, baseDomain: 'localhost', readinessWaitMs: 15000, upstreamHeader: 'x-sandgate-upstream', sandboxes: '' });
    expect(Object.isFrozen(c)).toBe(true);
    expect(c).toEqual(DEFAULTS);
  });

  it('layers file < environment < flags', () => {
    const files: Record<string, string> = { '/etc/sg.yaml': 'grpcPort: 7001\nadmin-port: 7090\nbaseDomain: sbx.example.com\n' };
    const c = resolveConfig({
      argv: ['--config', '/etc/sg.yaml', '--grpc-port=7003', '--route-order', 'host,headers'],
      env: { SANDGATE_GRPC_PORT: '7002', SANDGATE_READINESS_WAIT_MS: '500', PATH: '/bin' },
      readFile: (p) => files[p]!,
    });
    expect(c).toMatchObject({ grpcPort: 7003, adminPort: 7090, baseDomain: 'sbx.example.com', readinessWaitMs: 500, routeOrder: ['host', 'headers'] });
  });

  it("the program's own overrides win over flags and environment (a --workers process's gateway id)", () => {
    const c = resolveConfig({ argv: ['--gateway-id', 'g'], env: { SANDGATE_GATEWAY_ID: 'e' }, overrides: { gatewayId: 'g-w2' } });
    expect(c.gatewayId).toBe('g-w2');
    expect(resolveConfig({ argv: ['--gateway-id', 'g'], env: { SANDGATE_GATEWAY_ID: 'e' } }).gatewayId).toBe('g');
  });

  it('rejects unknown keys everywhere, with a hint', () => {
    rejects(() => resolveConfig({ argv: ['--grpc-prot', '1'] }), /unknown flag --grpc-prot \(did you mean --grpc-port\?\)/);
    rejects(() => resolveConfig({ env: { SANDGATE_BASE_DOMAN: 'x' } }), /SANDGATE_BASE_DOMAN.*did you mean SANDGATE_BASE_DOMAIN/);
    rejects(() => resolveConfig({ argv: ['--config', 'f.yaml'], readFile: () => 'readinesWaitMs: 5' }), /unknown key "readinesWaitMs".*did you mean readinessWaitMs/);
  });

  it('rejects bad values with the option named', () => {
    rejects(() => resolveConfig({ argv: ['--grpc-port', '70000'] }), /--grpc-port: must be between 0 and 65535/);
    rejects(() => resolveConfig({ argv: ['--grpc-port', 'abc'] }), /whole number/);
    rejects(() => resolveConfig({ argv: ['--log-level', 'loud'] }), /must be one of/);
    rejects(() => resolveConfig({ argv: ['--route-order', 'headers,hots'] }), /unknown value "hots" \(did you mean host\?\)/);
    rejects(() => resolveConfig({ argv: ['--base-domain', 'Example.COM'] }), /baseDomain/);
    rejects(() => resolveConfig({ argv: ['--base-domain', `${'a'.repeat(64)}.example.com`] }), /baseDomain/);
    rejects(() => resolveConfig({ argv: ['--default-namespace', '-team'] }), /defaultNamespace must be a DNS-1123 label/);
    rejects(() => resolveConfig({ argv: ['--grpc-port'] }), /needs a value/);
    rejects(() => resolveConfig({ argv: ['--presence-shards', '0'] }), /--presence-shards: must be between 1 and 1024/);
    rejects(() => resolveConfig({ argv: ['--presence-shards', '2.5'] }), /--presence-shards.*whole number/);
    expect(resolveConfig({ env: { SANDGATE_PRESENCE_SHARDS: '16' } }).presenceShards).toBe(16);
    rejects(() => resolveConfig({ argv: ['--config', 'x.yaml'], readFile: () => '- a\n- b' }), /mapping/);
  });

  it("bounds the proxy's HTTP/2 sessions to h2c ports from file, environment and flags, and rejects bad bounds", () => {
    expect(h2cLimits(resolveConfig())).toEqual(DEFAULT_H2C_LIMITS);
    const c = resolveConfig({
      argv: ['--config', '/etc/sg.yaml', '--h2c-max-streams-per-session', '1'],
      env: { SANDGATE_H2C_IDLE_TIMEOUT_MS: '250' },
      readFile: () => 'h2c-max-sessions-per-upstream: 2\nh2cIdleTimeoutMs: 900\n',
    });
    expect(h2cLimits(c)).toEqual({ maxSessionsPerUpstream: 2, maxStreamsPerSession: 1, idleMs: 250 });
    rejects(() => resolveConfig({ argv: ['--h2c-max-sessions-per-upstream', '0'] }), /--h2c-max-sessions-per-upstream: must be between 1 and 10000/);
    rejects(() => resolveConfig({ argv: ['--h2c-max-sessions-per-upstream=10001'] }), /--h2c-max-sessions-per-upstream: must be between 1 and 10000/);
    rejects(() => resolveConfig({ argv: ['--h2c-max-streams-per-session', '-1'] }), /--h2c-max-streams-per-session: must be between 1 and 1000000/);
    rejects(() => resolveConfig({ argv: ['--h2c-max-streams-per-session'] }), /--h2c-max-streams-per-session needs a value/);
    rejects(() => resolveConfig({ argv: ['--h2c-idle-timeout-ms', '1.5'] }), /--h2c-idle-timeout-ms: "1.5" is not a duration/);
    rejects(() => resolveConfig({ argv: ['--h2c-idle-timeout-ms', '0'] }), /--h2c-idle-timeout-ms: must be between 1ms and 24h/);
    rejects(() => resolveConfig({ env: { SANDGATE_H2C_MAX_STREAMS_PER_SESSION: 'many' } }), /SANDGATE_H2C_MAX_STREAMS_PER_SESSION: expected a whole number/);
    rejects(() => resolveConfig({ argv: ['--config', 'f.yaml'], readFile: () => 'h2cIdleTimeoutMs: 1e9' }), /h2cIdleTimeoutMs in f.yaml: must be between 1ms and 24h/);
    rejects(() => resolveConfig({ argv: ['--h2c-max-stream-per-session', '1'] }), /did you mean --h2c-max-streams-per-session\?/);
  });

  it("bounds every listener's connections, TLS handshake and first request from file, environment and flags, and rejects bad bounds", () => {
    expect(connectionLimits(resolveConfig())).toEqual(CONNECTION_LIMITS);
    expect(CONNECTION_LIMITS).toEqual({ maxConnections: 10_000, tlsHandshakeTimeoutMs: 10_000, requestHeaderTimeoutMs: 10_000 });
    const c = resolveConfig({
      argv: ['--config', '/etc/sg.yaml', '--tls-handshake-timeout-ms', '200ms'],
      env: { SANDGATE_REQUEST_HEADER_TIMEOUT_MS: '300' },
      readFile: () => 'max-connections: 5\ntlsHandshakeTimeoutMs: 900\n',
    });
    expect(connectionLimits(c)).toEqual({ maxConnections: 5, tlsHandshakeTimeoutMs: 200, requestHeaderTimeoutMs: 300 });
    rejects(() => resolveConfig({ argv: ['--max-connections', '0'] }), /--max-connections: must be between 1 and 1000000/);
    rejects(() => resolveConfig({ argv: ['--max-connections', 'lots'] }), /--max-connections: expected a whole number/);
    rejects(() => resolveConfig({ argv: ['--tls-handshake-timeout-ms', '0'] }), /--tls-handshake-timeout-ms: must be between 1ms and 2m/);
    rejects(() => resolveConfig({ argv: ['--tls-handshake-timeout-ms=120001'] }), /--tls-handshake-timeout-ms: must be between 1ms and 2m/);
    rejects(() => resolveConfig({ argv: ['--request-header-timeout-ms', '-5'] }), /--request-header-timeout-ms: "-5" is not a duration/);
    rejects(() => resolveConfig({ argv: ['--request-header-timeout-ms'] }), /--request-header-timeout-ms needs a value/);
    rejects(() => resolveConfig({ env: { SANDGATE_MAX_CONNECTIONS: '2.5' } }), /SANDGATE_MAX_CONNECTIONS: expected a whole number/);
    rejects(() => resolveConfig({ argv: ['--config', 'f.yaml'], readFile: () => 'requestHeaderTimeoutMs: 1e9' }), /requestHeaderTimeoutMs in f.yaml: must be between 1ms and 10m/);
  });

  it('reads every duration option with the one grammar, from flags, environment and file alike', () => {
    const files: Record<string, string> = { 'f.yaml': 'leaseTtlMs: 2000\nidle-timeout: 90s\nhandoverTimeoutMs: 1m\n' };
    const c = resolveConfig({
      argv: ['--config', 'f.yaml', '--link-max-ttl', '1h30m', '--grpc-idle-timeout-ms=90s'],
      env: { SANDGATE_PROXY_CONNECT_TIMEOUT_MS: '2500', SANDGATE_PRESENCE_RESCAN_MS: '1m30s' },
      readFile: (p) => files[p]!,
    });
    expect(c).toMatchObject({ linkMaxTtl: 5_400_000, grpcIdleTimeoutMs: 90_000, proxyConnectTimeoutMs: 2500, presenceRescanMs: 90_000, leaseTtlMs: 2000, idleTimeout: 90_000, handoverTimeoutMs: 60_000 });
    // A bare number counts in the option's unit: milliseconds for the -ms options, seconds for the others.
    expect(resolveConfig({ argv: ['--link-max-ttl', '90', '--idle-timeout', '0', '--lease-ttl-ms', '150'] })).toMatchObject({ linkMaxTtl: 90_000, idleTimeout: 0, leaseTtlMs: 150 });
    rejects(() => resolveConfig({ argv: ['--link-max-ttl', '1.5h'] }), /--link-max-ttl: "1.5h" is not a duration/);
    rejects(() => resolveConfig({ argv: ['--link-max-ttl', '500ms'] }), /--link-max-ttl: must be between 1s and 8760h/);
    rejects(() => resolveConfig({ env: { SANDGATE_IDLE_TIMEOUT: '' } }), /SANDGATE_IDLE_TIMEOUT: a duration is empty/);
    rejects(() => resolveConfig({ env: { SANDGATE_IDLE_TIMEOUT: '-5m' } }), /SANDGATE_IDLE_TIMEOUT: "-5m" is not a duration/);
    rejects(() => resolveConfig({ argv: ['--config', 'f.yaml'], readFile: () => 'leaseTtlMs: -1' }), /leaseTtlMs in f.yaml: expected a duration/);
    rejects(() => resolveConfig({ argv: ['--config', 'f.yaml'], readFile: () => 'idleTimeout: [1, 2]' }), /idleTimeout in f.yaml: expected a duration/);
    rejects(() => resolveConfig({ argv: ['--shutdown-timeout-ms', '11m'] }), /--shutdown-timeout-ms: must be between 0ms and 10m/);
  });

  it('redacts secrets and the passwords inside connection strings when printed', () => {
    const c = resolveConfig({
      argv: [
        '--presence', 'redis://:hunter2-presence@redis:6379/0',
        '--api-keys', 'rediss://keys:hunter2-keys@redis.example:6380',
        '--presence-redis-options', '{"sentinelPassword":"hunter2-sentinel","sentinels":[{"host":"s1","port":26379}],"name":"m"}',
        '--drivers', 'grpc://driver:hunter2-driver@10.0.0.1:9000?name=d',
        '--relay-secret', 'hunter2-relay-secret-0123456789abcdef',
      ],
    });
    const printed = JSON.stringify(redacted(c));
    expect(printed).not.toContain('hunter2');
    expect(redacted(c)).toMatchObject({ presence: 'redis://[redacted]@redis:6379/0', apiKeys: 'rediss://[redacted]@redis.example:6380', drivers: ['grpc://[redacted]@10.0.0.1:9000?name=d'], relaySecret: '[redacted]', grpcPort: 9001 });
    expect(JSON.parse(redacted(c).presenceRedisOptions as string)).toEqual({ sentinelPassword: '[redacted]', sentinels: [{ host: 's1', port: 26379 }], name: 'm' });
  });

  it("gives E2B's headers E2B's meaning by default, and lets each be changed", () => {
    expect(resolveConfig()).toMatchObject({
      trafficTokenHeaders: ['e2b-traffic-access-token'],
      stripCredentials: ['authorization', 'x-api-key', 'e2b-traffic-access-token'],
      envdTokenHeader: 'x-access-token',
      envdPort: 49983,
      e2bAnswers: true,
    });
    expect(resolveConfig({ argv: ['--envd-token-header=', '--no-e2b-answers'] })).toMatchObject({ envdTokenHeader: '', e2bAnswers: false });
    rejects(() => resolveConfig({ argv: ['--envd-token-header', 'X-Access-Token'] }), /header name "X-Access-Token"/);
    rejects(() => resolveConfig({ argv: ['--envd-port', '0'] }), /--envd-port/);
  });

  it('docs/configuration.md holds the generated option table', () => {
    const doc = readFileSync(new URL('../../docs/configuration.md', import.meta.url), 'utf8');
    expect(doc).toContain(configMarkdown());
  });
});

import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { configMarkdown } from '../../src/config/docs.js';
import { redacted, resolveConfig } from '../../src/config/load.js';
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

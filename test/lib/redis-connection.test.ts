import { describe, expect, it, vi } from 'vitest';
import { Cluster, Redis } from 'ioredis';
import { resolveConfig, redacted } from '../../src/config/load.js';
import { expectSandgateError } from '../helpers/sandgate-error.js';
import { createRedisClient, describeRedisTarget, keepConnecting, redactRedisOptionsText, redactRedisUrl, redisTarget, topologyOf } from '../../src/lib/redis-connection.js';
import { eventually, nextEvent } from '../helpers/eventually.js';
import { startRedisServer } from '../helpers/redis-server.js';

// One way to build every Redis connection: validation of the configuration, the topology it selects,
// and redaction of credentials wherever a target is printed.

describe('redisTarget', () => {
  const bad: { name: string; url: string; options: string; message: RegExp }[] = [
    { name: 'not a redis URL', url: 'http://x:6379', options: '', message: /must be a redis:\/\/ or rediss:\/\/ URL/ },
    { name: 'options not JSON', url: 'redis://h', options: '{"password": "hunter2"', message: /^presenceRedisOptions is not JSON$/ },
    { name: 'options not an object', url: 'redis://h', options: '[1]', message: /must be a JSON object/ },
    { name: 'sentinels without a name', url: 'redis://h', options: '{"sentinels":[{"host":"s","port":26379}]}', message: /needs "name"/ },
    { name: 'a sentinel without a port', url: 'redis://h', options: '{"sentinels":[{"host":"s"}],"name":"m"}', message: /sentinels must be a non-empty list/ },
    { name: 'an empty cluster', url: 'redis://h', options: '{"cluster":[]}', message: /cluster must be a non-empty list/ },
    { name: 'both sentinels and cluster', url: 'redis://h', options: '{"sentinels":[{"host":"s","port":1}],"name":"m","cluster":[{"host":"c","port":2}]}', message: /choose one/ },
  ];
  for (const t of bad) {
    it(`refuses ${t.name} (config_invalid), never echoing a password`, () => {
      const err = expectSandgateError(() => redisTarget(t.url, t.options, 'presence'), 'config_invalid', t.message);
      expect(err.message).not.toContain('hunter2');
    });
  }

  it('selects standalone, Sentinel or Cluster from the options', () => {
    expect(topologyOf(redisTarget('rediss://u:p@h:6380', '', 'x'))).toBe('standalone');
    expect(topologyOf(redisTarget('redis://h', '{"sentinels":[{"host":"s","port":26379}],"name":"m"}', 'x'))).toBe('sentinel');
    expect(topologyOf(redisTarget('redis://h', '{"cluster":[{"host":"c","port":7000}]}', 'x'))).toBe('cluster');
  });

  it('builds a Cluster client for cluster options and a plain client otherwise, without connecting', () => {
    const c = createRedisClient(redisTarget('redis://u:pw@h', '{"cluster":[{"host":"127.0.0.1","port":1}]}', 'x'), { name: 'n', commandTimeoutMs: 500 });
    const r = createRedisClient(redisTarget('redis://127.0.0.1:1', '', 'x'), { name: 'n', commandTimeoutMs: 500 });
    expect(c).toBeInstanceOf(Cluster);
    expect(r).toBeInstanceOf(Redis);
    expect(c.status).toBe('wait');
    expect(r.status).toBe('wait');
    expect((c as Cluster).options.redisOptions).toMatchObject({ username: 'u', password: 'pw', enableOfflineQueue: false, autoResendUnfulfilledCommands: false });
    c.disconnect();
    r.disconnect();
  });
});

describe('redaction', () => {
  const urls: [string, string][] = [
    ['redis://h:6379/0', 'redis://h:6379/0'],
    ['redis://:secret@h:6379', 'redis://[redacted]@h:6379'],
    ['rediss://user:secret@h:6380/2', 'rediss://[redacted]@h:6380/2'],
    ['rediss://user@h', 'rediss://[redacted]@h'],
    ['memory', 'memory'],
  ];
  for (const [raw, shown] of urls) it(`prints ${raw} as ${shown}`, () => expect(redactRedisUrl(raw)).toBe(shown));

  it('hides passwords, usernames and key material at any depth in the options', () => {
    const text = JSON.stringify({ sentinels: [{ host: 's', port: 1 }], name: 'm', sentinelPassword: 'sp', password: 'p', username: 'u', tls: { key: 'k', ca: 'public' } });
    const shown = redactRedisOptionsText(text);
    for (const secret of ['"sp"', '"p"', '"u"', '"k"']) expect(shown).not.toContain(secret);
    expect(JSON.parse(shown)).toMatchObject({ name: 'm', tls: { ca: 'public', key: '[redacted]' }, sentinelPassword: '[redacted]' });
    expect(redactRedisOptionsText('{"password": "oops"')).toBe('[redacted]');
  });

  it('the logged configuration and the target description carry no credentials', () => {
    const c = resolveConfig({
      argv: ['--presence', 'redis://gw:hunter2@r:6379', '--api-keys', 'rediss://k:hunter3@r:6380', '--presence-redis-options', '{"sentinels":[{"host":"s","port":26379}],"name":"m","sentinelPassword":"hunter4"}'],
    });
    const logged = JSON.stringify(redacted(c));
    for (const secret of ['hunter2', 'hunter3', 'hunter4']) expect(logged).not.toContain(secret);
    const described = JSON.stringify(describeRedisTarget(redisTarget(c.presence, c.presenceRedisOptions, 'presence')));
    expect(described).not.toContain('hunter');
    expect(JSON.parse(described)).toMatchObject({ topology: 'sentinel', name: 'm', url: 'redis://[redacted]@r:6379' });
  });
});

describe('keepConnecting', () => {
  it('reconnects a client that ioredis ended, until it is no longer wanted', async () => {
    const server = await startRedisServer();
    const client = createRedisClient(redisTarget(server.url, '', 'x'), { name: 'keep', commandTimeoutMs: 500 });
    client.on('error', () => undefined);
    let wanted = true;
    const stop = keepConnecting(client, () => wanted);
    try {
      await client.connect();
      // An ended client: what ioredis leaves behind when its connector fails during a failover.
      client.disconnect();
      await eventually(() => client.status === 'end', 10_000, 'the client to end');
      await eventually(() => client.status === 'ready', 10_000, 'the client to reconnect');
      expect(await client.ping()).toBe('PONG');
      // An absence has no event: with the timers faked, keepConnecting's 'end' handler runs, then every
      // timer it could have set is run at once, and the client must still be ended.
      vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] });
      wanted = false;
      const ended = nextEvent(client, 'end');
      client.disconnect();
      await ended;
      vi.advanceTimersByTime(60_000);
      expect(client.status).toBe('end');
    } finally {
      vi.useRealTimers();
      stop();
      client.disconnect();
      await server.stop();
    }
  });
});

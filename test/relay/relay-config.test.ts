import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { relaySecretFromConfig } from '../../src/config/secrets.js';
import { resolveRelayAddress } from '../../src/edge/relay/relay-config.js';
import { RelayCredentials } from '../../src/edge/relay/relay-credential.js';
import { formatRelayTarget, parseRelayTarget } from '../../src/edge/relay/relay-headers.js';

const SECRET = 'a-shared-relay-secret-of-32-bytes-or-more';

describe('relay configuration and headers', () => {
  it('resolves the secret from the file first, then the value; makes a random one when neither is set', () => {
    const dir = mkdtempSync(join(tmpdir(), 'sandgate-relay-'));
    const file = join(dir, 'secret');
    writeFileSync(file, SECRET + '\n');
    expect(relaySecretFromConfig({ relaySecret: 'ignored-because-the-file-wins-0123456789', relaySecretFile: file })).toEqual({ secret: SECRET, generated: false });
    expect(relaySecretFromConfig({ relaySecret: SECRET, relaySecretFile: '' })).toEqual({ secret: SECRET, generated: false });
    const a = relaySecretFromConfig({ relaySecret: '', relaySecretFile: '' });
    const b = relaySecretFromConfig({ relaySecret: '', relaySecretFile: '' });
    expect(a.generated).toBe(true);
    expect(a.secret).not.toBe(b.secret);
    expect(a.secret.length).toBeGreaterThanOrEqual(32);
  });

  it.each([
    ['too short', 'short', ''],
    ['a space', SECRET + ' x', ''],
    ['a missing file', '', '/nonexistent/relay-secret'],
  ])('refuses a secret with %s (config_invalid)', (_what, value, file) => {
    expect(() => relaySecretFromConfig({ relaySecret: value, relaySecretFile: file })).toThrow(expect.objectContaining({ code: 'config_invalid' }));
  });

  it('advertises the configured address, else the listen address with the bound port', () => {
    expect(resolveRelayAddress('10.1.2.3:8082', '0.0.0.0', 8082)).toBe('10.1.2.3:8082');
    expect(resolveRelayAddress('[fd00::1]:8082', '0.0.0.0', 8082)).toBe('[fd00::1]:8082');
    expect(resolveRelayAddress('', '0.0.0.0', 41234)).toBe('127.0.0.1:41234');
    expect(resolveRelayAddress('', '10.0.0.5', 8082)).toBe('10.0.0.5:8082');
    expect(resolveRelayAddress('', 'fd00::5', 8082)).toBe('[fd00::5]:8082');
    for (const bad of ['10.1.2.3', '10.1.2.3:0', '10.1.2.3:70000', 'fd00::1:8082', 'http://x:1', 'a b:1']) {
      expect(() => resolveRelayAddress(bad, '0.0.0.0', 8082), bad).toThrow(expect.objectContaining({ code: 'config_invalid' }));
    }
  });

  it('parses relay targets strictly', () => {
    expect(parseRelayTarget('team-a/web:8080')).toEqual({ namespace: 'team-a', name: 'web', port: 8080 });
    expect(formatRelayTarget({ namespace: 'team-a', name: 'web', port: 1 })).toBe('team-a/web:1');
    for (const bad of [undefined, '', 'web:80', 'team-a/web', 'team-a/web:', 'team-a/web:0', 'team-a/web:65536', 'team-a/web:08', 'team-a/web:+8', 'team-a/web:80 ', 'Team/web:80', 'a/b/c:80', 'team_a/web:80', '/web:80']) {
      expect(parseRelayTarget(bad), String(bad)).toBeUndefined();
    }
  });

  it('a relay credential is bound to one target, to the secret and to its expiry', () => {
    let now = 1_000_000;
    const creds = new RelayCredentials(SECRET, 10_000, () => now);
    const c = creds.mint('team-a/web:80');
    expect(c).not.toContain(SECRET);
    expect(creds.verify(c, 'team-a/web:80')).toBe('ok');
    // Another target, another deployment's secret, a tampered field, the secret itself: refused.
    expect(creds.verify(c, 'team-b/web:80')).toBe('invalid');
    expect(creds.verify(c, 'team-a/web:81')).toBe('invalid');
    expect(new RelayCredentials(SECRET + 'x', 10_000, () => now).verify(c, 'team-a/web:80')).toBe('invalid');
    const [v, exp, nonce, mac] = c.split('.') as [string, string, string, string];
    const later = String(Number(exp) + 60_000);
    for (const bad of [undefined, '', SECRET, [c, c], `${v}.${later}.${nonce}.${mac}`, `${v}.${exp}.${nonce}x.${mac}`, `${v}.${exp}.${nonce}.${mac.slice(1)}`, `v2.${exp}.${nonce}.${mac}`, `${c}.x`]) {
      expect(creds.verify(bad, 'team-a/web:80'), String(bad)).toBe('invalid');
    }
    now += 10_000;
    expect(creds.verify(c, 'team-a/web:80')).toBe('ok');
    now += 1;
    expect(creds.verify(c, 'team-a/web:80')).toBe('expired');
  });
});

import { describe, expect, it } from 'vitest';
import { claimAt, claimsMatch, parseNamespacePolicies, parseSandboxAccess, policyFor, withPolicyPublicPorts } from '../../src/domain/access-policy.js';
import { parseSandboxesFile } from '../../src/drivers/file/file-driver.js';
import { expectSandgateError } from '../helpers/sandgate-error.js';

describe('access policies', () => {
  const ns = parseNamespacePolicies({ default: ['keys'], namespaces: { 'team-a': ['keys', { jwt: { issuer: 'https://k8s' } }] } }, 'policies');
  const own = parseSandboxAccess({ default: [{ jwt: { issuer: 'https://idp' } }], ports: { 8080: ['public'], 9000: 'keys' } }, 'access');

  it('composes a port policy: the port, the sandbox default, the namespace, then keys', () => {
    expect(policyFor(own, 'team-a', 9000, ns)).toEqual([{ kind: 'keys' }]);
    expect(policyFor(own, 'team-a', 3000, ns)).toEqual([{ kind: 'jwt', issuer: 'https://idp', audience: undefined, claims: [] }]);
    expect(policyFor(undefined, 'team-a', 3000, ns)).toHaveLength(2);
    expect(policyFor(undefined, 'team-z', 3000, ns)).toEqual([{ kind: 'keys' }]);
  });

  it('carries public ports as publicPorts, and only per port', () => {
    expect(withPolicyPublicPorts([7000], own)).toEqual([7000, 8080]);
    expect(withPolicyPublicPorts(undefined, undefined)).toBeUndefined();
    expectSandgateError(() => parseSandboxAccess(['public'], 'access'), 'config_invalid', /per sandbox port/);
    expectSandgateError(() => parseNamespacePolicies({ default: ['public'] }, 'p'), 'config_invalid', /per sandbox port/);
  });

  it('refuses malformed policies with the path of the bad part', () => {
    expectSandgateError(() => parseSandboxAccess({ ports: { 70000: 'keys' } }, 'access'), 'config_invalid', /access.ports/);
    expectSandgateError(() => parseSandboxAccess({ ports: { 80: [] } }, 'access'), 'config_invalid', /access.ports.80/);
    expectSandgateError(() => parseSandboxAccess({ default: [{ jwt: { issuer: 'x', aud: 'y' } }] }, 'access'), 'config_invalid', /unknown key "aud"/);
    expectSandgateError(() => parseSandboxAccess({ default: ['oauth'] }, 'access'), 'config_invalid', /access.default\[0\]/);
    expectSandgateError(() => parseSandboxAccess({ default: [{ jwt: { issuer: 'x', claims: { 'a b': 'c' } } }] }, 'access'), 'config_invalid', /claim name/);
  });

  it('reads claims at dotted paths, names with dots included', () => {
    const claims = { 'kubernetes.io': { namespace: 'team-a', serviceaccount: { name: 'agent' } }, groups: ['dev', 'ops'], email: 'a@x.dev' };
    expect(claimAt(claims, 'kubernetes.io.namespace')).toBe('team-a');
    expect(claimAt(claims, 'kubernetes.io.serviceaccount.name')).toBe('agent');
    expect(claimAt(claims, 'kubernetes.namespace')).toBeUndefined();
    expect(claimsMatch([{ claim: 'groups', values: ['ops'] }, { claim: 'email', values: ['a@x.dev'] }], claims)).toBe(true);
    expect(claimsMatch([{ claim: 'groups', values: ['admin'] }], claims)).toBe(false);
    expect(claimsMatch([{ claim: 'kubernetes.io', values: ['team-a'] }], claims)).toBe(false);
  });

  it('takes a sandbox\'s access from the sandboxes file', () => {
    const [s] = parseSandboxesFile('sandboxes:\n  - {namespace: team-a, name: web, ports: [8080, 9000], access: {ports: {8080: [public], 9000: [{jwt: {issuer: "https://k8s", audience: sandgate}}]}}}\n');
    expect(s!.publicPorts).toEqual([8080]);
    expect(s!.access?.ports?.[9000]).toEqual([{ kind: 'jwt', issuer: 'https://k8s', audience: 'sandgate', claims: [] }]);
    expectSandgateError(() => parseSandboxesFile('sandboxes:\n  - {namespace: team-a, name: web, ports: [9000], access: {ports: {8080: public}}}\n'), 'sandboxes_file_invalid', /access makes port 8080 public, which is not in ports/);
  });
});

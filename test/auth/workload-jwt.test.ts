import { describe, expect, it } from 'vitest';
import { bearerJwt, parseJwtIssuers } from '../../src/auth/workload-jwt.js';
import { expectSandgateError } from '../helpers/sandgate-error.js';

/** The issuers file, read whole: every mistake is a config_invalid naming it, never a looser verifier. */

const JWKS = '{keys: []}';
const issuer = (fields: string) => `issuers:\n  - {issuer: "https://k8s", jwks: ${JWKS}, audiences: [sandgate], teamClaim: kubernetes.io.namespace${fields}}\n`;

describe('--jwt-issuers-file', () => {
  it('reads an issuer with defaults: RS256, 30 s of clock skew', () => {
    const i = parseJwtIssuers(issuer(''), false).get('https://k8s')!;
    expect(i).toMatchObject({ audiences: ['sandgate'], algorithms: ['RS256'], team: { claim: 'kubernetes.io.namespace' }, clockSkewSeconds: 30 });
  });

  it.each([
    ['alg none', ', algorithms: [none]', /asymmetric/],
    ['an HMAC algorithm', ', algorithms: [RS256, HS256]', /none and HMAC are never accepted/],
    ['both team and teamClaim', ', team: team-a', /exactly one of team, teamClaim/],
    ['a skew past 300 s', ', clockSkewSeconds: 3600', /clockSkewSeconds must be an integer 0-300/],
    ['an unknown key', ', aud: x', /unknown key "aud"/],
    ['both jwks and jwksUrl', ', jwksUrl: "https://k8s/jwks"', /exactly one of jwksUrl, jwks/],
  ])('refuses %s', (_n, fields, pattern) => {
    expectSandgateError(() => parseJwtIssuers(issuer(fields), false), 'config_invalid', pattern);
  });

  it('refuses an issuer with no audience (tokens are audience-bound)', () => {
    expectSandgateError(() => parseJwtIssuers(issuer('').replace('audiences: [sandgate]', 'audiences: []'), false), 'config_invalid', /audiences must list at least one audience/);
  });

  it('refuses an empty file, a non-http JWKS URL and an issuer listed twice', () => {
    expectSandgateError(() => parseJwtIssuers('issuers: []', false), 'config_invalid', /non-empty top-level `issuers` list/);
    expectSandgateError(() => parseJwtIssuers('issuers:\n  - {issuer: a, jwksUrl: "file:///etc/passwd", audiences: [x], team: t}', false), 'config_invalid', /must be http\(s\)/);
    expectSandgateError(() => parseJwtIssuers(issuer('') + issuer('').replace('issuers:\n', ''), false), 'config_invalid', /listed twice/);
  });

  it('takes a bearer token only when shaped as a JWT', () => {
    expect(bearerJwt('Bearer a.b.c')).toBe('a.b.c');
    expect(bearerJwt('bearer a.b.')).toBe('a.b.');
    expect(bearerJwt('Basic dXNlcjpwYXNz')).toBeUndefined();
    expect(bearerJwt('Bearer sgk_opaque')).toBeUndefined();
    expect(bearerJwt(`Bearer ${'a'.repeat(20_000)}.b.c`)).toBeUndefined();
    expect(bearerJwt(undefined)).toBeUndefined();
  });
});

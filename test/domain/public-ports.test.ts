import { describe, expect, it } from 'vitest';
import { accessFor, ADMIN, ANONYMOUS, INVALID_KEY, type KeyPolicy, type Principal } from '../../src/domain/access.js';
import { decide, type Decision } from '../../src/domain/decide.js';
import { sameHost } from '../../src/domain/link.js';
import type { RouteOptions, RouteRequest } from '../../src/domain/route-key.js';
import { SandboxView } from '../../src/view/sandbox-view.js';
import { snapshot } from '../helpers/snapshots.js';

/** Public ports and CORS preflights in decide(), pure: every principal × public / private port × preflight or not. */

const opts: RouteOptions = { order: ['headers', 'e2b-headers', 'host', 'path'], baseDomain: 'localhost', defaultNamespace: 'default', defaultPort: 8000, pathPrefix: 'sbx' };
const ALL_KEYS: KeyPolicy = { all: true, namespaces: new Set() };

function world(): SandboxView {
  const view = new SandboxView();
  view.registerDriver('d');
  view.replace('d', [
    snapshot({ namespace: 'team-a', name: 'web', uid: 'a1', ids: ['sbx-web'], ports: [3000, 8000], publicPorts: [3000], sessionModel: 'none', accessToken: 'tok' }),
    snapshot({ namespace: 'team-a', name: 'paused', uid: 'a2', publicPorts: [3000], sessionModel: 'none', state: 'paused' }),
    snapshot({ namespace: 'team-b', name: 'web', uid: 'b1', sessionModel: 'none', accessToken: 'tok' }),
  ]);
  return view;
}

const req = (host: string, over: Partial<RouteRequest> = {}): RouteRequest => ({ headers: {}, host, path: '/', method: 'GET', ...over });
const preflight = (host: string, headers: Record<string, string> = {}): RouteRequest =>
  req(host, { method: 'OPTIONS', headers: { origin: 'https://app.example', 'access-control-request-method': 'PUT', ...headers } });
const code = (d: Decision): string => (d.allow ? 'allow' : d.code);

describe('public ports in decide()', () => {
  const view = world();
  const team = (t: string): Principal => ({ kind: 'team', team: t });

  it.each<[string, Principal, string | undefined, string, string]>([
    ['no key, public port', ANONYMOUS, undefined, '3000-web.team-a.localhost', 'allow'],
    ['invalid key, public port', INVALID_KEY, undefined, '3000-web.team-a.localhost', 'allow'],
    ["another team's key, public port", team('team-b'), undefined, '3000-web.team-a.localhost', 'allow'],
    ['wrong traffic token, public port', team('team-a'), 'wrong', '3000-web.team-a.localhost', 'allow'],
    ['by id, public port', ANONYMOUS, undefined, '3000-sbx-web.localhost', 'allow'],
    ['no key, private port', ANONYMOUS, undefined, '8000-web.team-a.localhost', 'api_key_required'],
    ['invalid key, private port', INVALID_KEY, undefined, '8000-web.team-a.localhost', 'api_key_invalid'],
    ['own key, no token, private port', team('team-a'), undefined, '8000-web.team-a.localhost', 'token_required'],
    ['public port number on a sandbox that declares none', ANONYMOUS, undefined, '3000-web.team-b.localhost', 'api_key_required'],
    ['missing sandbox', ANONYMOUS, undefined, '3000-nope.team-a.localhost', 'api_key_required'],
    ['missing sandbox, with a key', ADMIN, undefined, '3000-nope.team-a.localhost', 'sandbox_not_found'],
    ['paused sandbox, public port', ANONYMOUS, undefined, '3000-paused.team-a.localhost', 'sandbox_paused'],
  ])('%s → %s', (_n, principal, token, host, want) => {
    expect(code(decide(view, opts, req(host), accessFor(principal, ALL_KEYS, token)))).toBe(want);
  });
});

describe('CORS preflights in decide()', () => {
  const view = world();
  const anon = accessFor(ANONYMOUS, ALL_KEYS, undefined);

  it('answers a refused preflight with one answer, whatever the target', () => {
    const answers = ['8000-web.team-a.localhost', '8000-web.team-b.localhost', '8000-nope.team-a.localhost', '3000-web.team-b.localhost'].map((h) => decide(view, opts, preflight(h), anon));
    for (const a of answers) expect(a).toEqual(answers[0]);
    expect(answers[0]).toMatchObject({ allow: false, code: 'cors_preflight', status: 204 });
    // A team key naming another team's sandbox, or a missing one: the same.
    const teamB = accessFor({ kind: 'team', team: 'team-b' }, ALL_KEYS, undefined);
    expect(decide(view, opts, preflight('8000-web.team-a.localhost'), teamB)).toEqual(answers[0]);
  });

  it('keeps the preflight answer for an E2B-addressed request (not the SDK statuses)', () => {
    const d = decide(view, opts, preflight('8000-sbx-nope.localhost'), anon);
    expect([code(d), d.allow ? 0 : d.status]).toEqual(['cors_preflight', 204]);
  });

  it('lets a preflight through to a public port, and with a valid credential', () => {
    expect(code(decide(view, opts, preflight('3000-web.team-a.localhost'), anon))).toBe('allow');
    expect(code(decide(view, opts, preflight('8000-web.team-a.localhost'), accessFor({ kind: 'team', team: 'team-a' }, ALL_KEYS, 'tok')))).toBe('allow');
  });

  it('echoes a header list, and nothing else', () => {
    const headersOf = (asked: string) => {
      const d = decide(view, opts, preflight('8000-web.team-a.localhost', { 'access-control-request-headers': asked }), anon);
      return d.allow ? undefined : d.headers?.find(([k]) => k === 'access-control-allow-headers')?.[1];
    };
    expect(headersOf('x-api-key, content-type')).toBe('x-api-key, content-type');
    expect(headersOf('x-api-key\r\nset-cookie: a=b')).toBeUndefined();
    expect(headersOf('a,'.repeat(600) + 'b')).toBeUndefined();
    expect(headersOf('')).toBeUndefined();
  });

  it('is not a preflight without Origin or Access-Control-Request-Method', () => {
    expect(code(decide(view, opts, req('8000-web.team-a.localhost', { method: 'OPTIONS', headers: { origin: 'https://a.example' } }), anon))).toBe('api_key_required');
    expect(code(decide(view, opts, req('8000-web.team-a.localhost', { method: 'OPTIONS', headers: { 'access-control-request-method': 'PUT' } }), anon))).toBe('api_key_required');
  });
});

describe('sameHost(): a link cookie counts for WebSockets and changes only from its own host', () => {
  it.each<[string, string | undefined, boolean]>([
    ['http://3000-web.team-a.localhost:8080', '3000-web.team-a.localhost:8080', true],
    ['https://3000-web.team-a.example.com', '3000-web.team-a.example.com', true],
    ['http://web.example:80', 'web.example', true],
    ['https://web.example', 'web.example:443', true],
    ['http://WEB.example', 'web.EXAMPLE', true],
    ['http://3000-evil.team-a.localhost:8080', '3000-web.team-a.localhost:8080', false],
    ['http://3000-web.team-a.localhost:8081', '3000-web.team-a.localhost:8080', false],
    ['null', '3000-web.team-a.localhost', false],
    ['ftp://3000-web.team-a.localhost', '3000-web.team-a.localhost', false],
    ['not a url', 'web.example', false],
    ['http://web.example', undefined, false],
  ])('%s vs %s → %s', (origin, host, want) => {
    expect(sameHost(origin, host)).toBe(want);
  });
});

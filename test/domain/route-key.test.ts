import { describe, expect, it } from 'vitest';
import { normaliseHost, parseRoute, type RouteOptions, type RouteRequest } from '../../src/domain/route-key.js';
import { isDnsLabel, parsePort } from '../../src/domain/labels.js';

const opts: RouteOptions = {
  order: ['headers', 'e2b-headers', 'host', 'path'],
  baseDomain: 'localhost',
  defaultNamespace: 'default',
  defaultPort: 49983,
  pathPrefix: 'sbx',
};

function req(p: { headers?: Record<string, string>; host?: string; path?: string }): RouteRequest {
  return { headers: p.headers ?? {}, host: p.host, path: p.path };
}

type Want = { namespace?: string; name?: string; id?: string; port: number; path?: string; source: string } | 'reject' | 'none';

// One row per request and what parseRoute makes of it, grouped by route source: the table is the
// specification, so rows that differ in one value stay rows.
const cases: [string, Parameters<typeof req>[0], Want][] = [
  // headers
  ['headers: all three', { headers: { 'x-sandbox-namespace': 'team-a', 'x-sandbox-id': 'web', 'x-sandbox-port': '8000' } }, { namespace: 'team-a', name: 'web', port: 8000, source: 'headers' }],
  ['headers: namespace defaults', { headers: { 'x-sandbox-id': 'web', 'x-sandbox-port': '8000' } }, { namespace: 'default', name: 'web', port: 8000, source: 'headers' }],
  ['headers: port defaults', { headers: { 'x-sandbox-id': 'web' } }, { namespace: 'default', name: 'web', port: 49983, source: 'headers' }],
  ['headers: empty port is 400, not the default', { headers: { 'x-sandbox-id': 'web', 'x-sandbox-port': '' } }, 'reject'],
  ['headers: port 0', { headers: { 'x-sandbox-id': 'web', 'x-sandbox-port': '0' } }, 'reject'],
  ['headers: port 65536', { headers: { 'x-sandbox-id': 'web', 'x-sandbox-port': '65536' } }, 'reject'],
  ['headers: port 65535 ok', { headers: { 'x-sandbox-id': 'web', 'x-sandbox-port': '65535' } }, { namespace: 'default', name: 'web', port: 65535, source: 'headers' }],
  ['headers: port 80abc', { headers: { 'x-sandbox-id': 'web', 'x-sandbox-port': '80abc' } }, 'reject'],
  ['headers: port -1', { headers: { 'x-sandbox-id': 'web', 'x-sandbox-port': '-1' } }, 'reject'],
  ['headers: port +80', { headers: { 'x-sandbox-id': 'web', 'x-sandbox-port': '+80' } }, 'reject'],
  ['headers: port 080 (leading zero)', { headers: { 'x-sandbox-id': 'web', 'x-sandbox-port': '080' } }, 'reject'],
  ['headers: port with space', { headers: { 'x-sandbox-id': 'web', 'x-sandbox-port': ' 80' } }, 'reject'],
  ['headers: empty id', { headers: { 'x-sandbox-id': '' } }, 'reject'],
  ['headers: empty namespace', { headers: { 'x-sandbox-id': 'web', 'x-sandbox-namespace': '' } }, 'reject'],
  ['headers: upper-case id', { headers: { 'x-sandbox-id': 'Web' } }, 'reject'],
  ['headers: id of 64 chars', { headers: { 'x-sandbox-id': 'a'.repeat(64) } }, 'reject'],
  ['headers: id of 63 chars', { headers: { 'x-sandbox-id': 'a'.repeat(63) } }, { namespace: 'default', name: 'a'.repeat(63), port: 49983, source: 'headers' }],
  ['headers: id with dot-dot', { headers: { 'x-sandbox-id': '..' } }, 'reject'],
  ['headers: id %2e%2e', { headers: { 'x-sandbox-id': '%2e%2e' } }, 'reject'],
  ['headers: id with CRLF', { headers: { 'x-sandbox-id': 'web\r\nx-evil: 1' } }, 'reject'],
  ['headers: id with unicode', { headers: { 'x-sandbox-id': 'wéb' } }, 'reject'],
  ['headers: id leading dash', { headers: { 'x-sandbox-id': '-web' } }, 'reject'],
  ['headers: duplicate id joined by the door', { headers: { 'x-sandbox-id': 'web,api' } }, 'reject'],
  ['headers: namespace with slash', { headers: { 'x-sandbox-id': 'web', 'x-sandbox-namespace': 'a/b' } }, 'reject'],
  ['headers: port alone names nothing', { headers: { 'x-sandbox-port': '8000' } }, 'none'],
  // E2B headers
  ['e2b: id and port', { headers: { 'e2b-sandbox-id': 'sbx-123', 'e2b-sandbox-port': '49983' } }, { id: 'sbx-123', port: 49983, source: 'e2b-headers' }],
  ['e2b: port defaults', { headers: { 'e2b-sandbox-id': 'sbx-123' } }, { id: 'sbx-123', port: 49983, source: 'e2b-headers' }],
  ['e2b: bad port', { headers: { 'e2b-sandbox-id': 'sbx-123', 'e2b-sandbox-port': 'x' } }, 'reject'],
  ['e2b: legacy id', { headers: { 'e2b-sandbox-id': 'team-a--web' } }, { id: 'team-a--web', port: 49983, source: 'e2b-headers' }],
  ['order: x-sandbox headers win over e2b', { headers: { 'x-sandbox-id': 'web', 'e2b-sandbox-id': 'sbx-123' } }, { namespace: 'default', name: 'web', port: 49983, source: 'headers' }],
  // host
  ['host: port-name.namespace.base', { host: '8000-web.team-a.localhost' }, { namespace: 'team-a', name: 'web', port: 8000, source: 'host' }],
  ['host: explicit :port suffix', { host: '8000-web.team-a.localhost:8080' }, { namespace: 'team-a', name: 'web', port: 8000, source: 'host' }],
  ['host: upper case normalised', { host: '8000-WEB.Team-A.LOCALHOST' }, { namespace: 'team-a', name: 'web', port: 8000, source: 'host' }],
  ['host: trailing dot normalised', { host: '8000-web.team-a.localhost.' }, { namespace: 'team-a', name: 'web', port: 8000, source: 'host' }],
  ['host: trailing dot and port', { host: '8000-web.team-a.localhost.:80' }, { namespace: 'team-a', name: 'web', port: 8000, source: 'host' }],
  ['host: E2B style id', { host: '49983-sbx-123.localhost' }, { id: 'sbx-123', port: 49983, source: 'host' }],
  ['host: name with dashes', { host: '3000-my-app-1.team-b.localhost' }, { namespace: 'team-b', name: 'my-app-1', port: 3000, source: 'host' }],
  ['host: too many labels', { host: '8000-web.extra.team-a.localhost' }, 'reject'],
  ['host: port 0', { host: '0-web.team-a.localhost' }, 'reject'],
  ['host: port 65536', { host: '65536-web.team-a.localhost' }, 'reject'],
  ['host: port 80abc', { host: '80abc-web.team-a.localhost' }, 'reject'],
  ['host: missing name', { host: '8000-.team-a.localhost' }, 'reject'],
  ['host: no dash', { host: '8000.team-a.localhost' }, 'reject'],
  ['host: name of 64 chars', { host: `8000-${'a'.repeat(64)}.team-a.localhost` }, 'reject'],
  ['host: name of 63 chars', { host: `8000-${'a'.repeat(63)}.team-a.localhost` }, { namespace: 'team-a', name: 'a'.repeat(63), port: 8000, source: 'host' }],
  ['host: name starts with a dash', { host: '8000--web.team-a.localhost' }, 'reject'],
  ['host: name ends with a dash', { host: '8000-web-.team-a.localhost' }, 'reject'],
  ['host: namespace starts with a dash', { host: '8000-web.-team.localhost' }, 'reject'],
  ['host: namespace ends with a dash', { host: '8000-web.team-.localhost' }, 'reject'],
  ['host: empty namespace', { host: '8000-web..localhost' }, 'reject'],
  ['host: namespace of 64 chars', { host: `8000-web.${'a'.repeat(64)}.localhost` }, 'reject'],
  ['host: port with a leading zero', { host: '08000-web.team-a.localhost' }, 'reject'],
  ['host: port of six digits', { host: '100000-web.team-a.localhost' }, 'reject'],
  ['host: huge host', { host: `8000-web.${'a'.repeat(300)}.localhost` }, 'reject'],
  ['host: unicode under base domain', { host: '8000-wéb.team-a.localhost' }, 'reject'],
  ['host: CRLF', { host: '8000-web.team-a.localhost\r\nx: y' }, 'reject'],
  ['host: punycode is a valid label (and simply unknown)', { host: '8000-xn--wb-bja.team-a.localhost' }, { namespace: 'team-a', name: 'xn--wb-bja', port: 8000, source: 'host' }],
  ['host: base domain itself names nothing', { host: 'localhost:9090' }, 'none'],
  ['host: other domain names nothing', { host: '8000-web.team-a.example.com' }, 'none'],
  ['host: suffix lookalike names nothing', { host: '8000-web.team-a.notlocalhost' }, 'none'],
  ['host: www under base names nothing', { host: 'www.localhost' }, 'none'],
  ['host: IPv6 literal names nothing', { host: '[::1]:9090' }, 'none'],
  ['host: IP names nothing', { host: '127.0.0.1:9090' }, 'none'],
  ['host: empty', { host: '' }, 'none'],
  // path
  ['path: rewritten', { path: '/sbx/team-a/web/8000/api/v1?x=1' }, { namespace: 'team-a', name: 'web', port: 8000, path: '/api/v1?x=1', source: 'path' }],
  ['path: no rest', { path: '/sbx/team-a/web/8000' }, { namespace: 'team-a', name: 'web', port: 8000, path: '/', source: 'path' }],
  ['path: trailing slash', { path: '/sbx/team-a/web/8000/' }, { namespace: 'team-a', name: 'web', port: 8000, path: '/', source: 'path' }],
  ['path: too short', { path: '/sbx/team-a/web' }, 'reject'],
  ['path: dot-dot in rest', { path: '/sbx/team-a/web/8000/../../etc/passwd' }, 'reject'],
  ['path: %2e%2e in rest', { path: '/sbx/team-a/web/8000/%2e%2e/secret' }, 'reject'],
  ['path: %2E. in rest', { path: '/sbx/team-a/web/8000/%2E./secret' }, 'reject'],
  ['path: dot-dot as name', { path: '/sbx/team-a/../8000/' }, 'reject'],
  ['path: encoded slash in name', { path: '/sbx/team-a/we%2fb/8000/' }, 'reject'],
  ['path: bad port', { path: '/sbx/team-a/web/0/' }, 'reject'],
  ['path: space', { path: '/sbx/team-a/web/8000/a b' }, 'reject'],
  ['path: CRLF', { path: '/sbx/team-a/web/8000/\r\nx' }, 'reject'],
  ['path: huge', { path: '/sbx/team-a/web/8000/' + 'a'.repeat(9000) }, 'reject'],
  ['path: other prefix names nothing', { path: '/other/team-a/web/8000/' }, 'none'],
  ['path: prefix lookalike names nothing', { path: '/sbxx/team-a/web/8000/' }, 'none'],
  // order across sources
  ['order: headers before host', { headers: { 'x-sandbox-id': 'api' }, host: '8000-web.team-a.localhost' }, { namespace: 'default', name: 'api', port: 49983, source: 'headers' }],
  ['order: bad host does not fall through to path', { host: '0-web.team-a.localhost', path: '/sbx/team-a/web/8000/' }, 'reject'],
  ['nothing at all', {}, 'none'],
];

describe('parseRoute', () => {
  it.each(cases)('%s', (_name, input, want) => {
    const got = parseRoute(req(input), opts);
    if (want === 'reject') {
      expect(typeof got).toBe('string');
      return;
    }
    if (want === 'none') {
      expect(got).toBeUndefined();
      return;
    }
    expect(typeof got).toBe('object');
    expect(got).toEqual({ namespace: want.namespace, name: want.name, id: want.id, port: want.port, path: want.path, source: want.source });
  });

  it('honours a configured order (host first)', () => {
    const got = parseRoute(req({ headers: { 'x-sandbox-id': 'api' }, host: '8000-web.team-a.localhost' }), { ...opts, order: ['host', 'headers'] });
    expect(got).toMatchObject({ name: 'web', source: 'host' });
  });

  it('skips sources that are not in the order', () => {
    expect(parseRoute(req({ path: '/sbx/team-a/web/8000/' }), { ...opts, order: ['headers', 'host'] })).toBeUndefined();
  });

  it('path routing is off when the prefix is empty', () => {
    expect(parseRoute(req({ path: '/sbx/team-a/web/8000/' }), { ...opts, pathPrefix: '' })).toBeUndefined();
  });

  // The host is read in one pass (route-key.ts): the parse must agree with the grammar, written here as a
  // regular expression, on every host over an alphabet that hits each branch.
  it('reads every generated host as the host grammar does', () => {
    const label = '[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?';
    const grammar = new RegExp(`^([1-9][0-9]{0,4})-(${label})(?:\\.(${label}))?\\.localhost$`);
    const ports = ['8000', '1', '65535', '0', '65536', '08', 'a', ''];
    const dashes = ['-', '-', '-', '--', '.', ''];
    const labels = ['web', 'a', 'b-c', 'a1', 'Team', '9', 'a'.repeat(63), 'a'.repeat(64), '-x', 'x-', 'a.b', 'é', ' ', ''];
    let x = 7;
    let routed = 0;
    const next = (n: number): number => {
      x = (Math.imul(x, 1103515245) + 12345) >>> 0;
      return (x >>> 8) % n;
    };
    for (let k = 0; k < 20_000; k++) {
      const pick = (from: readonly string[]): string => from[next(from.length)]!;
      const body = pick(ports) + pick(dashes) + pick(labels) + (next(2) === 0 ? '.' + pick(labels) : '');
      const raw = body + (next(4) === 0 ? '' : '.localhost') + (next(3) === 0 ? ':' + next(70_000) : '') + (next(5) === 0 ? '.' : '');
      const got = parseRoute(req({ host: raw }), { ...opts, order: ['host'] });
      const m = grammar.exec(normaliseHost(raw) ?? '');
      const port = m === null ? 0 : Number(m[1]);
      if (m !== null && port <= 65535) {
        const want = m[3] === undefined ? { id: m[2], namespace: undefined, name: undefined } : { id: undefined, namespace: m[3], name: m[2] };
        expect(got, raw).toEqual({ ...want, port, path: undefined, source: 'host' });
        routed++;
      } else {
        expect(typeof got === 'object', raw).toBe(false);
      }
    }
    expect(routed).toBeGreaterThan(1000);
  });

  it('works with a multi-label base domain', () => {
    const got = parseRoute(req({ host: '8000-web.team-a.sandboxes.example.com' }), { ...opts, baseDomain: 'sandboxes.example.com' });
    expect(got).toMatchObject({ namespace: 'team-a', name: 'web', port: 8000 });
  });
});

describe('labels and ports', () => {
  it.each([
    ['a', true],
    ['a-b', true],
    ['a--b', true],
    ['0abc', true],
    ['', false],
    ['-a', false],
    ['a-', false],
    ['A', false],
    ['a_b', false],
    ['a.b', false],
  ] as const)('isDnsLabel(%j) = %s', (s, want) => expect(isDnsLabel(s)).toBe(want));

  it.each([
    ['1', 1],
    ['65535', 65535],
    ['65536', 0],
    ['0', 0],
    ['', 0],
    ['00080', 0],
    ['123456', 0],
    ['1e3', 0],
    ['８０', 0],
  ] as const)('parsePort(%j) = %s', (s, want) => expect(parsePort(s)).toBe(want));

  it('normaliseHost', () => {
    expect(normaliseHost('A.B.:80')).toBe('a.b');
    expect(normaliseHost('[::1]:80')).toBeUndefined();
    expect(normaliseHost(':80')).toBeUndefined();
  });
});

import { describe, expect, it } from 'vitest';
import { accessFor, NO_KEYS_REQUIRED } from '../../src/domain/access.js';
import { decide, NOT_FOUND } from '../../src/domain/decide.js';
import { parseTunnelAuthority, type RouteOptions } from '../../src/domain/route-key.js';
import { readAnnotations, readIdentity } from '../../src/drivers/kubernetes/sandbox-object.js';
import { SandboxView } from '../../src/view/sandbox-view.js';
import { snapshot } from '../helpers/snapshots.js';

/** Tunnels in the pure core: the authority a CONNECT names, and the decision on it (port declared TCP or not). */

const opts: RouteOptions = { order: ['headers', 'e2b-headers', 'host', 'path'], baseDomain: 'sandboxes.test', defaultNamespace: 'default', defaultPort: 8000, pathPrefix: 'sbx' };

describe('parseTunnelAuthority()', () => {
  it.each([
    ['web.team-a.sandboxes.test:22', { namespace: 'team-a', name: 'web', id: undefined, port: 22 }],
    ['WEB.Team-A.Sandboxes.Test.:5432', { namespace: 'team-a', name: 'web', id: undefined, port: 5432 }],
    ['sbx-1.sandboxes.test:22', { namespace: undefined, name: undefined, id: 'sbx-1', port: 22 }],
  ])('%s names a sandbox port', (authority, want) => {
    expect(parseTunnelAuthority(authority, opts)).toMatchObject(want);
  });

  it.each([
    'web.team-a.sandboxes.test',
    'web.team-a.sandboxes.test:',
    'web.team-a.sandboxes.test:0',
    'web.team-a.sandboxes.test:65536',
    'web.team-a.sandboxes.test:022',
    'web.team-a.sandboxes.test:22:22',
    'a.b.team-a.sandboxes.test:22',
    'sandboxes.test:22',
    '.sandboxes.test:22',
    '-web.team-a.sandboxes.test:22',
    'web.team-a.example.com:22',
    'web.team-a.evilsandboxes.test:22',
    '127.0.0.1:22',
    '[::1]:22',
    'web.team a.sandboxes.test:22',
    'web.team-a.sandboxes.test:22\r\nx: y',
    `${'a'.repeat(300)}.sandboxes.test:22`,
    '',
  ])('%j names no sandbox', (authority) => {
    expect(parseTunnelAuthority(authority, opts)).toBeUndefined();
  });
});

describe('decide() for a tunnel', () => {
  const view = new SandboxView();
  view.registerDriver('d');
  view.replace('d', [
    snapshot({ name: 'web', uid: 'u1', ids: ['sbx-1'], ports: [22, 8000], tcpPorts: [22], sessionModel: 'none' }),
    snapshot({ name: 'any', uid: 'u2', sessionModel: 'none' }),
    snapshot({ name: 'paused', uid: 'u3', ports: [22, 8000], tcpPorts: [22], state: 'paused' }),
    snapshot({ namespace: 'team-b', name: 'db', uid: 'u4', ports: [5432], tcpPorts: [5432], sessionModel: 'none' }),
  ]);
  const tunnel = (authority: string) => ({ headers: {}, host: authority, path: undefined, method: 'CONNECT', tunnel: true });

  it.each([
    ['a declared TCP port', 'web.team-a.sandboxes.test:22', 200, 'ok'],
    ['the E2B form', 'sbx-1.sandboxes.test:22', 200, 'ok'],
    ['a port declared http', 'web.team-a.sandboxes.test:8000', 409, 'port_not_tcp'],
    ['a sandbox with no port list: no port is TCP', 'any.team-a.sandboxes.test:22', 409, 'port_not_tcp'],
    ['a port not exposed', 'web.team-a.sandboxes.test:23', 403, 'port_not_allowed'],
    ['a paused sandbox: refused as for any request (the door may wake it)', 'paused.team-a.sandboxes.test:22', 409, 'sandbox_paused'],
    ['a missing sandbox', 'nope.team-a.sandboxes.test:22', 404, 'sandbox_not_found'],
    ['an address', '10.0.0.1:22', 404, 'sandbox_not_found'],
    ['the host form of HTTP requests', '22-web.team-a.sandboxes.test:22', 404, 'sandbox_not_found'],
  ])('%s', (_n, authority, status, code) => {
    const d = decide(view, opts, tunnel(authority));
    expect(d.allow ? [200, 'ok'] : [d.status, d.code]).toEqual([status, code]);
  });

  it('a port not declared TCP is refused before the sandbox is woken: the denial is not waitable', () => {
    const d = decide(view, opts, tunnel('paused.team-a.sandboxes.test:8000'));
    expect(d.allow ? 'allow' : [d.code, d.waitable]).toEqual(['port_not_tcp', false]);
  });

  it("another team's TCP port answers as a missing sandbox, the same object", () => {
    const access = accessFor({ kind: 'team', team: 'team-a' }, NO_KEYS_REQUIRED, undefined);
    expect(decide(view, opts, tunnel('db.team-b.sandboxes.test:5432'), access)).toBe(NOT_FOUND);
    expect(decide(view, opts, tunnel('nope.team-b.sandboxes.test:5432'), access)).toBe(NOT_FOUND);
  });

  it('an HTTP request is not a tunnel: a TCP port is decided as before', () => {
    const d = decide(view, opts, { headers: {}, host: '22-web.team-a.sandboxes.test', path: '/' });
    expect(d.allow).toBe(true);
  });
});

describe('sandgate.dev/port-protocols on Kubernetes Sandboxes', () => {
  const annotated = (v: string) => {
    const warnings: string[] = [];
    const id = readIdentity({ metadata: { namespace: 'team-a', name: 'web', uid: 'u', annotations: { 'sandgate.dev/port-protocols': v } } })!;
    return { ann: readAnnotations(id, { defaultSessionModel: 'none', onWarning: (m) => warnings.push(m) }), warnings };
  };

  it('reads tcp entries apart from h2c ones', () => {
    const { ann, warnings } = annotated('22=tcp, 5432=tcp,50051=h2c,8000=http');
    expect(ann.tcpPorts).toEqual([22, 5432]);
    expect(ann.h2cPorts).toEqual([50051]);
    expect(warnings).toEqual([]);
  });

  it.each(['22=ssh', '22=tcp,22=h2c', '22=tcp,22=http', '0=tcp', '22=tcp=x'])('ignores %j whole, with a warning: no port is TCP', (v) => {
    const { ann, warnings } = annotated(v);
    expect(ann.tcpPorts).toBeUndefined();
    expect(ann.h2cPorts).toBeUndefined();
    expect(warnings.join('\n')).toMatch(/port-protocols.*ignored/);
  });
});

import { describe, expect, it } from 'vitest';
import { accessFor, ANONYMOUS, NO_KEYS_REQUIRED } from '../../src/domain/access.js';
import { decide, NOT_FOUND } from '../../src/domain/decide.js';
import type { RouteOptions } from '../../src/domain/route-key.js';
import { SandboxView } from '../../src/view/sandbox-view.js';
import { cond, presence, snapshot } from '../helpers/snapshots.js';

const opts: RouteOptions = { order: ['headers', 'e2b-headers', 'host', 'path'], baseDomain: 'localhost', defaultNamespace: 'default', defaultPort: 8000, pathPrefix: 'sbx' };

function world() {
  const view = new SandboxView();
  view.registerDriver('d');
  view.replace('d', [
    snapshot({ name: 'ready', uid: 'u1', ids: ['sbx-1'], ports: [8000, 9000], sessionModel: 'none' }),
    snapshot({ name: 'any-port', uid: 'u2', sessionModel: 'none' }),
    snapshot({ name: 'nosession', uid: 'u3' }),
    snapshot({ name: 'session', uid: 'u4', endpoint: { kind: 'address', addresses: ['fd00::4'] } }),
    snapshot({ name: 'paused', uid: 'u5', state: 'paused' }),
    snapshot({ name: 'deleting', uid: 'u6', state: 'deleting' }),
    snapshot({ name: 'failed', uid: 'u7', state: 'failed', conditions: [cond('Ready', 'False', 'PodFailed', 'OOMKilled')] }),
    snapshot({ name: 'expired', uid: 'u8', shutdownTime: 1 }),
    snapshot({ name: 'relay', uid: 'u9', sessionModel: 'none', endpoint: { kind: 'relay' } }),
    snapshot({ name: 'updating', uid: 'u10', state: 'starting', conditions: [cond('Ready', 'False', 'InplaceUpdating')] }),
    snapshot({ name: 'grpc', uid: 'u12', ports: [8000, 50051], h2cPorts: [50051], sessionModel: 'none' }),
    snapshot({ name: 'grpc-paused', uid: 'u13', ports: [50051], h2cPorts: [50051], state: 'paused' }),
    snapshot({ name: 'envd', uid: 'u11', ids: ['sbx-envd'], sessionModel: 'none', envdAccessToken: 'envd-secret', accessToken: 'traffic' }),
  ]);
  view.setPresence('team-a', 'session', presence());
  return view;
}

const h = (name: string, port = '8000') => ({ headers: { 'x-sandbox-namespace': 'team-a', 'x-sandbox-id': name, 'x-sandbox-port': port }, host: undefined, path: undefined });

const e = (id: string, port = '8000') => ({ headers: { 'e2b-sandbox-id': id, 'e2b-sandbox-port': port }, host: undefined, path: undefined });

describe('decide()', () => {
  const view = world();
  it.each([
    ['ready sandbox, allowed port', h('ready'), 200, 'ok'],
    ['E2B id via host', { headers: {}, host: '9000-sbx-1.localhost', path: '/' }, 200, 'ok'],
    ['legacy id via host', { headers: {}, host: '8000-team-a--ready.localhost', path: '/' }, 200, 'ok'],
    ['any port when no allow-list', h('any-port', '1234'), 200, 'ok'],
    ['port outside the allow-list', h('ready', '22'), 403, 'port_not_allowed'],
    ['unknown sandbox', h('nope'), 404, 'sandbox_not_found'],
    // E2B-addressed requests get the statuses the E2B SDK reads (domain/e2b-answers.ts).
    ['E2B: unknown id (headers) reads as not running', e('sbx-404'), 502, 'sandbox_not_found'],
    ['E2B: unknown id (host) reads as not running', { headers: {}, host: '49983-sbx-404.localhost', path: '/' }, 502, 'sandbox_not_found'],
    ['E2B: paused reads as not running', e('team-a--paused'), 502, 'sandbox_paused'],
    ['E2B: deleting reads as not running', e('team-a--deleting'), 502, 'sandbox_gone'],
    ['E2B: no supervisor yet is retryable', e('team-a--nosession'), 429, 'sandbox_not_ready'],
    ['E2B: the port allow-list keeps its status', e('sbx-1', '22'), 403, 'port_not_allowed'],
    ['paused', h('paused'), 409, 'sandbox_paused'],
    ['deleting', h('deleting'), 410, 'sandbox_gone'],
    ['expired', h('expired'), 410, 'sandbox_gone'],
    ['failed', h('failed'), 502, 'sandbox_failed'],
    ['relay-only without a relay', h('relay'), 502, 'sandbox_unreachable'],
    ['backend ready, no supervisor', h('nosession'), 503, 'sandbox_not_ready'],
    ['updating', h('updating'), 503, 'sandbox_not_ready'],
    ['bad port header', h('ready', 'abc'), 400, 'invalid_route'],
    ['no route at all', { headers: {}, host: 'localhost', path: '/' }, 400, 'invalid_route'],
  ] as const)('%s → %i %s', (_n, req, status, code) => {
    const d = decide(view, opts, req);
    if (d.allow) expect([200, 'ok']).toEqual([status, code]);
    else expect([d.status, d.code]).toEqual([status, code]);
  });

  it.each([
    ['right envd token on the envd port', 'envd-secret', 49983, 'ok'],
    ['wrong envd token on the envd port', 'not-it', 49983, 'envd_token_invalid'],
    ['no envd token: left to envd', undefined, 49983, 'ok'],
    ['a user port needs the traffic token, whatever the envd token', 'envd-secret', 8000, 'token_required'],
  ] as const)('envd token at the edge: %s', (_n, token, port, code) => {
    const d = decide(view, opts, e('sbx-envd', String(port)), accessFor(ANONYMOUS, NO_KEYS_REQUIRED, undefined, { token, port: 49983 }));
    expect(d.allow ? 'ok' : d.code).toBe(code);
  });

  it('without envd semantics (port 0) the envd port needs the traffic token too', () => {
    const d = decide(view, opts, e('sbx-envd', '49983'), accessFor(ANONYMOUS, NO_KEYS_REQUIRED, undefined, { token: 'envd-secret', port: 0 }));
    expect(d.allow ? 'ok' : d.code).toBe('token_required');
    const ok = decide(view, opts, e('sbx-envd', '8000'), accessFor(ANONYMOUS, NO_KEYS_REQUIRED, 'traffic', { token: 'not-it', port: 49983 }));
    expect(ok.allow ? 'ok' : ok.code).toBe('ok');
  });

  it('--e2b-answers false keeps sandgate statuses for E2B-addressed requests', () => {
    const plain = { ...opts, e2bAnswers: false };
    const d = decide(view, plain, e('sbx-404'));
    expect([!d.allow && d.status, !d.allow && d.code]).toEqual([404, 'sandbox_not_found']);
    expect(d).toBe(NOT_FOUND);
    const p = decide(view, plain, e('team-a--paused'));
    expect([!p.allow && p.status, !p.allow && p.message]).toEqual([409, 'The sandbox is paused']);
  });

  it('E2B paused answer tells the SDK user how to resume', () => {
    const d = decide(view, opts, e('team-a--paused'));
    expect(!d.allow && d.message).toContain('Sandbox.connect()');
  });

  it('an unsynced gateway is retryable for an E2B client and 503 for others', () => {
    const cold = new SandboxView();
    cold.registerDriver('d');
    const a = decide(cold, opts, e('sbx-1'));
    const b = decide(cold, opts, h('ready'));
    expect([!a.allow && a.status, !a.allow && a.code]).toEqual([429, 'gateway_not_ready']);
    expect([!b.allow && b.status, !b.allow && b.code]).toEqual([503, 'gateway_not_ready']);
  });

  it('denies a WebSocket to an h2c port 501 upgrade_not_supported (an upgrade or an extended CONNECT), before any phase', () => {
    const ws = (name: string, port: string, headers: Record<string, string>) => decide(view, opts, { ...h(name, port), headers: { ...h(name, port).headers, ...headers } });
    for (const headers of [{ upgrade: 'websocket' }, { ':protocol': 'websocket' }] as Record<string, string>[]) {
      expect(ws('grpc', '50051', headers)).toMatchObject({ allow: false, status: 501, code: 'upgrade_not_supported' });
      expect(ws('grpc-paused', '50051', headers)).toMatchObject({ allow: false, status: 501, code: 'upgrade_not_supported' });
      expect(ws('grpc', '8000', headers)).toMatchObject({ allow: true });
    }
    expect(ws('grpc', '50051', {})).toMatchObject({ allow: true });
  });

  it('allow carries the upstream from the view, IPv6 bracketed', () => {
    const d = decide(view, opts, h('session', '3000'));
    expect(d.allow && d.upstream).toBe('[fd00::4]:3000');
  });

  it('a relay-only sandbox routes to the relay listener of the gateway holding its session', () => {
    const v = world();
    v.setPresence('team-a', 'relay', presence({ gatewayId: 'gw-b' }));
    expect(decide(v, opts, h('relay'))).toMatchObject({ allow: false, code: 'sandbox_unreachable' });
    let relays: Record<string, string> = { 'gw-b': '127.0.0.1:8082' };
    v.setRelayResolver((id) => relays[id]);
    expect(decide(v, opts, h('relay', '3000'))).toMatchObject({ allow: true, upstream: '127.0.0.1:8082', relay: true });
    relays = {};
    expect(decide(v, opts, h('relay'))).toMatchObject({ allow: false, code: 'sandbox_unreachable' });
  });

  it('an access check runs before the lookup and right after it, before anything is revealed', () => {
    const hidden = decide(view, opts, h('paused'), { before: () => undefined, after: () => NOT_FOUND });
    expect(hidden).toBe(decide(view, opts, h('nope')));
    const early = decide(view, opts, h('paused'), { before: () => NOT_FOUND, after: () => undefined });
    expect(early).toBe(NOT_FOUND);
  });

  it('a path route carries the rewritten path', () => {
    const d = decide(view, opts, { headers: {}, host: undefined, path: '/sbx/team-a/ready/8000/x?y=1' });
    expect(d.allow && d.target.path).toBe('/x?y=1');
  });

  it('a client-sent upstream header never decides the upstream', () => {
    const d = decide(view, opts, { headers: { ...h('ready').headers, 'x-sandgate-upstream': '169.254.169.254:80' }, host: undefined, path: undefined });
    expect(d.allow && d.upstream).toBe('10.0.0.1:8000');
  });

  it('not-ready denials carry phase, reason, Retry-After and are waitable; others are not waitable', () => {
    const d = decide(view, opts, h('nosession'));
    expect(d).toMatchObject({ allow: false, phase: 'Provisioning', reason: 'SupervisorNotConnected', retryAfter: 1, waitable: true, namespace: 'team-a', name: 'nosession' });
    expect(decide(view, opts, h('paused'))).toMatchObject({ waitable: false });
    expect(decide(view, opts, h('nope'))).toMatchObject({ waitable: false });
  });

  it('answers gateway_not_ready until every driver has synced', () => {
    const v = new SandboxView();
    v.registerDriver('k8s');
    expect(decide(v, opts, h('ready'))).toMatchObject({ status: 503, code: 'gateway_not_ready', retryAfter: 1 });
    v.replace('k8s', []);
    expect(decide(v, opts, h('ready'))).toMatchObject({ status: 404, code: 'sandbox_not_found' });
  });
});

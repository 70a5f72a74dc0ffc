import { Metadata, type ClientDuplexStream } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { presence, snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { envoyRequestHeaders, extProcClient, startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { eventually } from '../helpers/eventually.js';

type Stream = ClientDuplexStream<unknown, Record<string, any>>;

function open(client: ReturnType<typeof extProcClient>, deadlineMs?: number): Stream {
  const opts = deadlineMs === undefined ? {} : { deadline: Date.now() + deadlineMs };
  return (client.Process as (m: Metadata, o: unknown) => Stream)(new Metadata(), opts);
}

function next(stream: Stream): Promise<Record<string, any>> {
  return new Promise((resolve, reject) => {
    const onData = (m: Record<string, any>) => {
      stream.off('error', onError);
      resolve(m);
    };
    const onError = (e: Error) => {
      stream.off('data', onData);
      reject(e);
    };
    stream.once('data', onData);
    stream.once('error', onError);
  });
}

function ended(stream: Stream): Promise<void> {
  return new Promise((resolve) => {
    stream.once('end', resolve);
    stream.resume();
  });
}

const base = { ':method': 'GET', ':scheme': 'http', 'x-forwarded-for': '203.0.113.7', 'x-request-id': 'req-1' };

function setHeaders(msg: Record<string, any>): Record<string, { value: string; action: string }> {
  const out: Record<string, { value: string; action: string }> = {};
  for (const h of msg.request_headers.response.header_mutation.set_headers) {
    out[h.header.key] = { value: Buffer.from(h.header.raw_value).toString(), action: h.append_action };
  }
  return out;
}

describe('Envoy ext_proc v3 Process', () => {
  let t: TestGateway;
  let client: ReturnType<typeof extProcClient>;

  beforeAll(async () => {
    t = await startTestGateway(
      [
        new TestDriver([
          snapshot({ name: 'web', sessionModel: 'none', endpoint: { kind: 'address', addresses: ['127.0.0.2'] } }),
          snapshot({ name: 'notebook', uid: 'u2', endpoint: { kind: 'address', addresses: ['127.0.0.3'] } }),
        ]),
      ],
      { readinessWaitMs: 5000, pathPrefix: 'sbx' },
    );
    client = extProcClient(t.grpcTarget);
  });
  afterAll(async () => {
    client.close();
    await t.close();
  });

  it('request_headers (raw_value) → header mutation in raw_value with clear_route_cache', async () => {
    const s = open(client);
    s.write(envoyRequestHeaders({ ...base, ':authority': '8000-web.team-a.localhost', ':path': '/', 'x-sandgate-upstream': '169.254.169.254:80' }));
    const msg = await next(s);
    expect(msg.response).toBe('request_headers');
    const r = msg.request_headers.response;
    expect(r.status ?? 'CONTINUE').toBe('CONTINUE');
    expect(r.clear_route_cache).toBe(true);
    expect(setHeaders(msg)['x-sandgate-upstream']).toEqual({ value: '127.0.0.2:8000', action: 'OVERWRITE_IF_EXISTS_OR_ADD' });
    s.end();
    await ended(s);
  });

  it('accepts header values in `value` too, removes routing headers and rewrites the path', async () => {
    const s = open(client);
    s.write(envoyRequestHeaders({ ...base, ':authority': 'gw.example.com', ':path': '/sbx/team-a/web/3000/x', 'x-sandbox-id': 'ignored-by-order' }, true));
    const msg = await next(s);
    // Headers come before the path in the route order: x-sandbox-id decides (namespace "default": unknown).
    expect(msg.immediate_response.details).toBe('sandbox_not_found');
    s.end();
    const s2 = open(client);
    s2.write(envoyRequestHeaders({ ...base, ':authority': 'gw.example.com', ':path': '/sbx/team-a/web/3000/x?y=2' }, true));
    const ok = await next(s2);
    expect(setHeaders(ok)[':path']?.value).toBe('/x?y=2');
    expect(setHeaders(ok)['x-sandgate-upstream']?.value).toBe('127.0.0.2:3000');
    s2.end();
  });

  it('denies with immediate_response: status, typed JSON body, headers', async () => {
    const s = open(client);
    s.write(envoyRequestHeaders({ ...base, ':authority': '8000-missing.team-a.localhost', ':path': '/' }));
    const msg = await next(s);
    const ir = msg.immediate_response;
    expect(ir.status.code).toBe('NotFound');
    expect(JSON.parse(Buffer.from(ir.body).toString())).toMatchObject({ code: 'sandbox_not_found' });
    expect(ir.details).toBe('sandbox_not_found');
    const ct = ir.headers.set_headers.find((h: any) => h.header.key === 'content-type');
    expect(Buffer.from(ct.header.raw_value).toString()).toBe('application/json');
    s.end();
  });

  it('answers every other message kind exactly once with a plain CONTINUE, in order', async () => {
    const s = open(client);
    const got: string[] = [];
    s.on('data', (m: Record<string, any>) => got.push(m.response));
    s.write(envoyRequestHeaders({ ...base, ':authority': '8000-web.team-a.localhost', ':path': '/' }));
    s.write({ request_body: { body: Buffer.from('hello'), end_of_stream: true } });
    s.write({ request_trailers: { trailers: { headers: [] } } });
    s.write({ response_headers: { headers: { headers: [{ key: ':status', raw_value: Buffer.from('200') }] } } });
    s.write({ response_body: { body: Buffer.from('x'), end_of_stream: true } });
    s.write({ response_trailers: { trailers: { headers: [] } } });
    s.end();
    await ended(s);
    expect(got).toEqual(['request_headers', 'request_body', 'request_trailers', 'response_headers', 'response_body', 'response_trailers']);
  });

  it('holds request_headers during a readiness gap; later messages stay behind it', async () => {
    const s = open(client);
    const got: string[] = [];
    s.on('data', (m: Record<string, any>) => got.push(m.response));
    s.write(envoyRequestHeaders({ ...base, ':authority': '8888-notebook.team-a.localhost', ':path': '/' }));
    s.write({ response_headers: { headers: { headers: [] } } });
    await eventually(() => t.gw.view.waiters.size === 1, 5000, 'the request to wait for readiness');
    expect(got).toEqual([]);
    t.gw.view.setPresence('team-a', 'notebook', presence());
    s.end();
    await ended(s);
    expect(got).toEqual(['request_headers', 'response_headers']);
    t.gw.view.setPresence('team-a', 'notebook', undefined);
  });

  it('a cancelled stream releases its waiter (nothing leaks)', async () => {
    const s = open(client);
    s.on('error', () => {});
    s.write(envoyRequestHeaders({ ...base, ':authority': '8888-notebook.team-a.localhost', ':path': '/' }));
    await eventually(() => t.gw.view.waiters.size === 1, 5000, 'the request to wait for readiness');
    s.cancel();
    await eventually(() => t.gw.view.waiters.size === 0, 5000, 'the waiter to be released');
  });

  it('a deadline ends the stream and releases its waiter', async () => {
    const s = open(client, 150);
    const err = new Promise<Error>((resolve) => s.once('error', resolve));
    s.write(envoyRequestHeaders({ ...base, ':authority': '8888-notebook.team-a.localhost', ':path': '/' }));
    expect(String((await err).message)).toMatch(/DEADLINE_EXCEEDED|Deadline/i);
    await eventually(() => t.gw.view.waiters.size === 0, 5000, 'the waiter to be released');
  });

  it('half-close with nothing in flight ends the stream', async () => {
    const s = open(client);
    s.end();
    await ended(s);
  });
});

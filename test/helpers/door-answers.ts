import { Metadata, type ClientDuplexStream } from '@grpc/grpc-js';
import { check, envoyCheckRequest, envoyRequestHeaders, type TestGateway } from './gateway.js';
import { rawRequest } from './upstream.js';

/**
 * One request asked of each door Envoy calls — ext_authz, ext_proc, HTTP authz — with the answer reduced to
 * what the three share, so a test runs the same cases through all of them.
 */

/** Envoy's HttpStatus codes as the protos' enum names (proto-loader hands enums as strings). */
const STATUS: Record<string, number> = { OK: 200, NoContent: 204, SeeOther: 303, Unauthorized: 401, Forbidden: 403, NotFound: 404, Conflict: 409, NotImplemented: 501 };

/** Transport headers a door adds on its own: not part of the gateway's answer. */
export const TRANSPORT_HEADERS: ReadonlySet<string> = new Set(['date', 'connection', 'keep-alive', 'transfer-encoding', 'content-length']);

export interface DoorAnswer {
  readonly status: number;
  /** Response headers of a denial (lower-case names; transport headers left out). */
  readonly headers: Record<string, string>;
  readonly body: string;
  /** On an allow at an Envoy door: the request headers the sandbox must not get. */
  readonly removed?: readonly string[];
  /** On an allow: the Cookie the sandbox gets (null: the header removed; undefined: left as it was). */
  readonly cookie?: string | null | undefined;
  /** On an allow: the request headers the answer sets (overwriting a client's copy), by lower-case name. */
  readonly set?: Record<string, string>;
}

export interface DoorRequest {
  readonly host: string;
  readonly path?: string | undefined;
  readonly method?: string | undefined;
  readonly headers?: Record<string, string> | undefined;
  /** `http` unless given: what Envoy saw the client use. */
  readonly scheme?: string | undefined;
}

export type Ask = (p: DoorRequest) => Promise<DoorAnswer>;
type Stream = ClientDuplexStream<unknown, Record<string, any>>;

const cookieOf = (set: string | undefined, removed: readonly string[]): string | null | undefined => (set !== undefined ? set : removed.includes('cookie') ? null : undefined);

/** The three doors of gateway `t`, asked through its Envoy clients and its admin port. */
export function envoyDoors(t: TestGateway): { extAuthz: Ask; extProc: Ask; httpAuthz: Ask } {
  const { authz, proc } = t.envoyClients();

  const extAuthz: Ask = async (p) => {
    const scheme = p.scheme ?? 'http';
    const req = envoyCheckRequest({ host: p.host, path: p.path, method: p.method, headers: { ':scheme': scheme, ...p.headers } });
    req.attributes.request.http.scheme = scheme;
    const res = await check(authz, req);
    if (res.http_response === 'ok_response') {
      const all: Record<string, string> = {};
      for (const h of res.ok_response.headers as { header: { key: string; value: string }; append_action: string }[]) {
        // Only an overwrite replaces a client's copy (the default action appends to it).
        if (h.append_action === 'OVERWRITE_IF_EXISTS_OR_ADD') all[h.header.key] = h.header.value;
      }
      const removed = (res.ok_response.headers_to_remove ?? []) as string[];
      return { status: 200, headers: {}, body: '', removed, cookie: cookieOf(all.cookie, removed), set: all };
    }
    const headers: Record<string, string> = {};
    for (const h of res.denied_response.headers as { header: { key: string; value: string } }[]) headers[h.header.key] = h.header.value;
    return { status: STATUS[res.denied_response.status.code as string] ?? -1, headers, body: String(res.denied_response.body) };
  };

  const extProc: Ask = async (p) => {
    const stream = (proc.Process as (m: Metadata) => Stream)(new Metadata());
    const answer = new Promise<Record<string, any>>((resolve, reject) => {
      stream.once('data', resolve);
      stream.once('error', reject);
    });
    stream.write(envoyRequestHeaders({ ':authority': p.host, ':path': p.path ?? '/', ':method': p.method ?? 'GET', ':scheme': p.scheme ?? 'http', ...p.headers }));
    const m = await answer;
    stream.end();
    if (m.request_headers !== undefined) {
      const mutation = m.request_headers.response.header_mutation;
      const all: Record<string, string> = {};
      for (const h of mutation.set_headers as { header: { key: string; raw_value: Buffer }; append_action: string }[]) {
        if (h.append_action === 'OVERWRITE_IF_EXISTS_OR_ADD') all[h.header.key] = Buffer.from(h.header.raw_value).toString();
      }
      const removed = (mutation.remove_headers ?? []) as string[];
      return { status: 200, headers: {}, body: '', removed, cookie: cookieOf(all.cookie, removed), set: all };
    }
    const r = m.immediate_response;
    const headers: Record<string, string> = {};
    for (const h of r.headers.set_headers as { header: { key: string; raw_value: Buffer } }[]) headers[h.header.key] = Buffer.from(h.header.raw_value).toString();
    return { status: STATUS[r.status.code as string] ?? -1, headers, body: Buffer.from(r.body).toString() };
  };

  const httpAuthz: Ask = async (p) => {
    // Envoy's http_service asks with the original method and the headers its allowed_headers list.
    const res = await rawRequest(t.gw.adminPort, `/authz${p.path ?? '/'}`, { 'x-forwarded-host': p.host, 'x-forwarded-proto': p.scheme ?? 'http', ...p.headers }, p.method ?? 'GET');
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(res.headers)) if (!TRANSPORT_HEADERS.has(k)) headers[k] = Array.isArray(v) ? v.join(', ') : String(v);
    if (res.status !== 200) return { status: res.status, headers, body: res.body };
    const removed = (headers['x-envoy-auth-headers-to-remove'] ?? '').split(',').filter((h) => h !== '');
    // allowed_upstream_headers copies these onto the request, replacing any value there.
    const set = { ...headers };
    delete set['x-envoy-auth-headers-to-remove'];
    return { status: 200, headers: {}, body: '', removed, cookie: cookieOf(headers.cookie, removed), set };
  };

  return { extAuthz, extProc, httpAuthz };
}

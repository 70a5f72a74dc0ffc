import type { IncomingMessage, ServerResponse } from 'node:http';
import { SandgateError } from '../domain/errors.js';
import type { LinkOrder } from '../domain/link.js';
import { sandboxKey } from '../domain/sandbox.js';
import type { SandboxView } from '../view/sandbox-view.js';
import type { ApiScope } from './api-access.js';
import { sendError, sendJson } from './respond.js';

/**
 * Signed links on the operator API (docs/links.md): `POST /v1/sandboxes/{ns}/{name}/links` mints one for
 * a sandbox the caller may see, `DELETE /v1/links/{id}` revokes one (and every cookie it set) on every
 * gateway. The minting and the revocation store are the gateway's (auth/link-service.ts).
 */

export interface MintedLinkJson {
  readonly url: string;
  /** RFC 3339. */
  readonly expiresAt: string;
  readonly id: string;
}

export interface LinkApi {
  mint(order: LinkOrder): Promise<MintedLinkJson>;
  /**
   * Revokes a link `caller` may revoke. Throws `invalid_request` when links cannot be revoked here (no
   * store), `link_not_found` for a link of a namespace the caller does not see, `link_revocations_exceeded`
   * past the namespace's bound.
   */
  revoke(id: string, caller: { sees(namespace: string): boolean; readonly all: boolean }): Promise<void>;
}

const MAX_BODY = 16 * 1024;

async function readJson(req: IncomingMessage): Promise<unknown> {
  let size = 0;
  const chunks: Buffer[] = [];
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY) throw new SandgateError('invalid_request', `the body must be at most ${MAX_BODY} bytes`);
    chunks.push(chunk);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown;
  } catch {
    throw new SandgateError('invalid_request', 'the body must be JSON');
  }
}

function orderOf(body: unknown, e: { namespace: string; name: string; uid: string }, team: string): LinkOrder {
  const bad = (m: string): never => {
    throw new SandgateError('invalid_request', m);
  };
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return bad('the body must be a JSON object {port, path?, methods?, ttlSeconds?, websocket?}');
  const o = body as Record<string, unknown>;
  for (const k of Object.keys(o)) if (!['port', 'path', 'methods', 'ttlSeconds', 'websocket'].includes(k)) bad(`unknown field ${JSON.stringify(k)}`);
  if (typeof o.port !== 'number') bad('port must be a number');
  if (o.path !== undefined && typeof o.path !== 'string') bad('path must be a string');
  if (o.methods !== undefined && (!Array.isArray(o.methods) || !o.methods.every((m) => typeof m === 'string'))) bad('methods must be a list of strings');
  if (o.ttlSeconds !== undefined && typeof o.ttlSeconds !== 'number') bad('ttlSeconds must be a number');
  if (o.websocket !== undefined && typeof o.websocket !== 'boolean') bad('websocket must be a boolean');
  return {
    namespace: e.namespace,
    name: e.name,
    uid: e.uid,
    port: o.port as number,
    path: o.path as string | undefined,
    methods: (o.methods as string[] | undefined)?.map((m) => m.toUpperCase()),
    websocket: o.websocket === true,
    ttlSeconds: o.ttlSeconds as number | undefined,
    team,
  };
}

/** `POST /v1/sandboxes/{ns}/{name}/links`: another tenant's sandbox gets the answer a missing one gets. */
export async function mintLink(links: LinkApi, view: SandboxView, scope: ApiScope & { ok: true }, ns: string, name: string, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const refused = scope.refuses(ns);
  if (refused !== undefined) return sendError(res, refused);
  const e = scope.sees(ns) ? view.get(ns, name) : undefined;
  if (e === undefined) return sendError(res, 'sandbox_not_found', `No sandbox ${sandboxKey(ns, name)}`);
  try {
    const order = orderOf(await readJson(req), { namespace: e.namespace, name: e.name, uid: e.uid }, scope.team);
    sendJson(res, 201, await links.mint(order), { 'referrer-policy': 'no-referrer' });
  } catch (err) {
    if (!(err instanceof SandgateError)) throw err;
    sendError(res, err.code, err.message);
  }
}

/**
 * `DELETE /v1/links/{id}`: the id names the link's namespace (auth/link-ids.ts); a link of a namespace the
 * caller does not see gets the answer a made-up id of that namespace gets.
 */
export async function revokeLink(links: LinkApi, scope: ApiScope & { ok: true }, id: string, res: ServerResponse): Promise<void> {
  if (!/^[A-Za-z0-9_-]{1,128}$/.test(id)) return sendError(res, 'invalid_request', 'a link id is 1-128 of [A-Za-z0-9_-]');
  try {
    await links.revoke(id, { sees: scope.sees, all: scope.team === '*' });
  } catch (err) {
    if (!(err instanceof SandgateError)) throw err;
    return sendError(res, err.code, err.message);
  }
  sendJson(res, 200, { id, revoked: true });
}

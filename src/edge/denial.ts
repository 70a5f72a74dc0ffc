import type { Duplex } from 'node:stream';
import type { Deny } from '../domain/decide.js';
import type { RouteRequest } from '../domain/route-key.js';

/**
 * How a denial looks to a client, the same at every front door: a JSON body
 * `{code, message, namespace?, name?, phase?, reason?}`, or a small HTML page when the client asks for
 * text/html (a browser opening a sandbox URL), plus `Retry-After` on retryable 503s.
 */

export const ERROR_HEADER = 'x-sandgate-error';

export interface RenderedDenial {
  readonly status: number;
  readonly headers: readonly (readonly [string, string])[];
  readonly body: string;
}

/** True when the client asked for a page: an Accept of `text/html,…`, or a browser's navigation (`Sec-Fetch-Mode: navigate`). */
export function wantsHtml(accept: string | undefined, fetchMode?: string): boolean {
  return (accept !== undefined && accept.includes('text/html')) || fetchMode === 'navigate';
}

export function denialJson(d: Deny): string {
  return JSON.stringify({ code: d.code, message: d.message, namespace: d.namespace, name: d.name, phase: d.phase, reason: d.reason });
}

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

export function denialHtml(d: Deny): string {
  const what = d.namespace !== undefined ? `<p>Sandbox <code>${escapeHtml(d.namespace)}/${escapeHtml(d.name ?? '')}</code>` + (d.phase ? ` is <b>${escapeHtml(d.phase)}</b>` : '') + (d.reason ? ` (${escapeHtml(d.reason)})` : '') + '.</p>' : '';
  return (
    '<!doctype html><html><head><meta charset="utf-8"><title>' +
    `${d.status} ${escapeHtml(d.code)}</title></head><body><h1>${escapeHtml(d.message)}</h1>${what}` +
    `<p><small>sandgate: ${escapeHtml(d.code)}</small></p></body></html>\n`
  );
}

/**
 * The page a browser gets while its sandbox is still starting: it reloads itself after `Retry-After`
 * seconds through `<meta http-equiv="refresh">` (no JavaScript), so the app appears once it is up.
 */
export function startingHtml(d: Deny): string {
  const seconds = d.retryAfter ?? 2;
  const name = d.namespace !== undefined ? ` <code>${escapeHtml(d.namespace)}/${escapeHtml(d.name ?? '')}</code>` : '';
  return (
    `<!doctype html><html><head><meta charset="utf-8"><meta http-equiv="refresh" content="${seconds}"><title>Starting…</title></head>` +
    `<body><h1>Starting…</h1><p>The sandbox${name} is waking up. This page reloads itself in ${seconds} s.</p>` +
    `<p><small>sandgate: ${escapeHtml(d.code)}</small></p></body></html>\n`
  );
}

export function renderDenial(d: Deny, accept: string | undefined, fetchMode?: string): RenderedDenial {
  // A 204 (the gateway's CORS preflight answer) has no content (RFC 9110 §15.3.5): no body, no type.
  if (d.status === 204) return { status: 204, headers: d.headers === undefined ? [[ERROR_HEADER, d.code]] : [[ERROR_HEADER, d.code], ...d.headers], body: '' };
  // `starting` is set only for a browser navigation (edge/decider.ts), whatever its Accept.
  const html = d.starting === true || wantsHtml(accept, fetchMode);
  const headers: [string, string][] = [
    ['content-type', html ? 'text/html; charset=utf-8' : 'application/json'],
    [ERROR_HEADER, d.code],
  ];
  if (d.retryAfter !== undefined) headers.push(['retry-after', String(d.retryAfter)]);
  if (d.headers !== undefined) for (const [k, v] of d.headers) headers.push([k, v]);
  return { status: d.status, headers, body: !html ? denialJson(d) : d.starting === true ? startingHtml(d) : denialHtml(d) };
}

/** A response not yet started: node:http's ServerResponse, or the proxy front's. */
export interface DenialResponse {
  readonly headersSent: boolean;
  readonly destroyed: boolean;
  writeHead(status: number, headers: string[]): unknown;
  end(body: string): unknown;
}

/**
 * Answers a denial with its length, unless the response has started (or its client left); returns the
 * body's length in bytes, or -1 when nothing was written.
 */
export function respondDenial(res: DenialResponse, d: Deny, accept: string | undefined, fetchMode?: string): number {
  if (res.headersSent || res.destroyed) return -1;
  const r = renderDenial(d, accept, fetchMode);
  const length = Buffer.byteLength(r.body);
  res.writeHead(r.status, r.status === 204 ? r.headers.flat() : [...r.headers.flat(), 'content-length', String(length)]);
  res.end(r.body);
  return length;
}

/** Writes a denial as a raw HTTP/1.1 response on a socket that asked to upgrade; returns its body's length, or -1 when nothing was written. */
export function writeDenial(socket: Duplex, d: Deny, route: RouteRequest): number {
  if (socket.destroyed) return -1;
  const r = renderDenial(d, route.headers.accept, route.headers['sec-fetch-mode']);
  const length = Buffer.byteLength(r.body);
  let head = `HTTP/1.1 ${r.status} ${d.code}\r\n`;
  for (const [k, v] of r.headers) head += `${k}: ${v}\r\n`;
  head += `content-length: ${length}\r\nconnection: close\r\n\r\n`;
  socket.end(head + r.body);
  return length;
}

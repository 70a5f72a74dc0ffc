import type { IncomingMessage, ServerResponse } from 'node:http';
import { deny } from '../../domain/decide.js';
import { respondDenial } from '../denial.js';
import { singleHost, isDeny } from '../request-target.js';

/**
 * The plain proxy port when it only redirects to HTTPS: every request gets `308 Permanent Redirect` to the
 * same host and target over `https://` (308 keeps the method and body, RFC 9110 §15.4.9). The Location is
 * built from the request's own Host, which must be a host name or address with an optional port (it is
 * the client's own destination, never another), and an origin-form target; anything else is 400
 * `invalid_route`.
 */

/** A DNS name or IPv4 address, or a bracketed IPv6 address; then an optional port. */
const HOST = /^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}))(?::\d{1,5})?$/;
/** An origin-form target of visible ASCII (node:http already refused control bytes). */
const ORIGIN_FORM = /^\/[\x21-\x7e]*$/;

/** Where a request to the plain port is sent: undefined when its Host or target cannot be redirected. */
export function redirectLocation(host: string | undefined, target: string | undefined, httpsPort: number): string | undefined {
  if (host === undefined || target === undefined || !ORIGIN_FORM.test(target)) return undefined;
  const m = HOST.exec(host);
  if (m === null) return undefined;
  return `https://${m[1]!}${httpsPort === 443 ? '' : ':' + httpsPort}${target}`;
}

export function httpsRedirect(httpsPort: () => number): (req: IncomingMessage, res: ServerResponse) => void {
  return (req, res) => {
    const host = singleHost(req.rawHeaders);
    const location = typeof host === 'object' && isDeny(host) ? undefined : redirectLocation(host, req.url, httpsPort());
    if (location === undefined) {
      const d = deny('invalid_route', 'This port only redirects to HTTPS: the request needs one Host header and an origin-form target');
      respondDenial(res, d, req.headers.accept);
      return;
    }
    res.writeHead(308, ['location', location, 'content-length', '0']).end();
  };
}

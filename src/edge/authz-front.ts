import { STATUS_CODES, type Server } from 'node:http';
import type { Logger } from '../observability/logger.js';
import { BAD_HEADER_VALUE, FrontConnection, HttpFront, httpDate, parseFrontHead, type FrontHandler, type FrontRequest } from './http-front.js';
import { isAuthzPath, type AuthzReply, type AuthzSink, type HttpAuthz } from './http-authz.js';

/**
 * The admin port's front for HTTP authz (http-front.ts): it answers the requests Envoy's `http_service`
 * and nginx's `auth_request` (with `proxy_http_version 1.1`) send — an HTTP/1.1 request for `/authz…`
 * with no body, each header once — from the decision, and hands anything else to node:http.
 */

const acceptsAuthz = (_method: string, url: string): boolean => isAuthzPath(url);

/** parseFrontHead() for the admin port: the request when the front answers it, undefined when node:http reads it. */
export function parseAuthzHead(text: string, end: number): FrontRequest | undefined {
  return parseFrontHead(text, end, acceptsAuthz);
}

/** The answer side of one front connection, made once per connection. */
class AuthzAnswer implements AuthzSink {
  method = '';

  constructor(private readonly conn: FrontConnection<AuthzAnswer>) {}

  signal(): AbortSignal {
    return this.conn.signal();
  }

  peer(): string {
    return this.conn.socket.remoteAddress ?? '';
  }

  send(r: AuthzReply): void {
    const conn = this.conn;
    const close = conn.closing;
    if (!conn.socket.destroyed) {
      let head = 'HTTP/1.1 ' + r.status + ' ' + (STATUS_CODES[r.status] ?? '') + '\r\n';
      let values = '';
      for (let i = 0; i < r.head.length; i += 2) {
        const value = r.head[i + 1]!;
        head += r.head[i] + ': ' + value + '\r\n';
        values += value;
      }
      // A decision's values cannot hold such bytes, by construction: checked anyway, as node:http's writeHead does.
      if (BAD_HEADER_VALUE.test(values)) {
        conn.socket.destroy();
        return;
      }
      head += 'Date: ' + httpDate() + '\r\n' + conn.connectionLines(close) + '\r\n';
      conn.socket.write(this.method === 'HEAD' ? head : head + r.body);
    }
    conn.done(close);
  }
}

/** Installs the front on the admin server (before it listens). */
export class AuthzFront extends HttpFront<AuthzAnswer> {
  /** `event`: 'secureConnection' when the admin port speaks TLS (an https.Server). */
  constructor(server: Server, authz: HttpAuthz, log: Logger, event: 'connection' | 'secureConnection' = 'connection') {
    const handler: FrontHandler<AuthzAnswer> = {
      accepts: acceptsAuthz,
      connect: (conn) => new AuthzAnswer(conn),
      handle(req, answer) {
        answer.method = req.method;
        authz.handleParsed(req.url, req.headers, answer);
      },
    };
    super(server, handler, log, event);
  }
}

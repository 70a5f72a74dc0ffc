import type { Duplex } from 'node:stream';
import type { Logger } from 'pino';
import { ERROR_CODES } from '../domain/errors.js';

/**
 * The last line behind every listener's handlers (proxy, relay, admin, ops, supervisor): an exception
 * thrown while handling one request ends that request — 500 `internal_error` when nothing of its answer
 * was sent, the connection cut when something was — and never the process. The fault is logged at
 * `error` with the request's context (method, host, path without its query, source address) and counted
 * (`sandgate_http_handler_errors_total{listener}`).
 *
 * A handler's own call is guarded by `run`; what it hangs on events that fire later (an upstream's
 * response, a readiness wait's end) is guarded by wrapping the listener with `bind`, since an exception
 * in an event listener escapes every try around the code that added it.
 */

/** What a guarded request answers with: node:http's ServerResponse, or a front's response. */
export interface GuardedResponse {
  readonly headersSent: boolean;
  readonly destroyed: boolean;
  writeHead(status: number, headers: string[]): unknown;
  end(body: string): unknown;
  destroy(): unknown;
}

/** The request a fault is logged with: its method, target and Host (the query is dropped: it may hold a credential). */
export interface GuardedRequest {
  readonly method?: string | undefined;
  readonly url?: string | undefined;
  readonly headers: { readonly host?: string | undefined };
  /** The client's address: node:http's request has its socket, the forwarding code's its `clientIp`. */
  readonly socket?: { readonly remoteAddress?: string | undefined };
  readonly clientIp?: string;
}

/** How a guarded request is ended after a fault. */
type Ender = { readonly res: GuardedResponse } | { readonly socket: Duplex };

const INTERNAL = JSON.stringify({ code: 'internal_error', message: ERROR_CODES.internal_error.message });

export class RequestGuard {
  constructor(
    /** The listener's name, the metric's label: proxy, relay, admin, ops, supervisor. */
    readonly listener: string,
    private readonly log: Logger,
    /** Counts faults (the listener's series of sandgate_http_handler_errors_total). */
    private readonly counter?: { inc(): void },
  ) {}

  /** Runs `fn`, the handling of `req`; a throw ends the request through `res`. */
  run(req: GuardedRequest, res: GuardedResponse, fn: () => void): void {
    this.wrap(req, { res }, fn)();
  }

  /** Runs `fn`, the handling of an upgrade request; a throw cuts its socket. */
  runUpgrade(req: GuardedRequest, socket: Duplex, fn: () => void): void {
    this.wrap(req, { socket }, fn)();
  }

  /** `fn` as an event listener of `req`'s handling: a throw in it ends the request through `res`. */
  bind<A extends unknown[]>(req: GuardedRequest, res: GuardedResponse, fn: (...args: A) => void): (...args: A) => void {
    return this.wrap(req, { res }, fn);
  }

  /** `fn` as an event listener of an upgrade request's handling: a throw in it cuts the socket. */
  bindUpgrade<A extends unknown[]>(req: GuardedRequest, socket: Duplex, fn: (...args: A) => void): (...args: A) => void {
    return this.wrap(req, { socket }, fn);
  }

  private wrap<A extends unknown[]>(req: GuardedRequest, end: Ender, fn: (...args: A) => void): (...args: A) => void {
    return (...args) => {
      try {
        fn(...args);
      } catch (err) {
        this.fault(err, req, end);
      }
    };
  }

  /** A fault met outside run() (a handler's rejected promise): ends the request as run() would. */
  fail(err: unknown, req: GuardedRequest, res: GuardedResponse): void {
    this.fault(err, req, { res });
  }

  /** A fault met outside runUpgrade() (an upgrade handler's rejected promise): cuts the socket. */
  failUpgrade(err: unknown, req: GuardedRequest, socket: Duplex): void {
    this.fault(err, req, { socket });
  }

  private fault(err: unknown, req: GuardedRequest, end: Ender): void {
    this.counter?.inc();
    const url = req.url ?? '';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    const source = req.clientIp ?? req.socket?.remoteAddress;
    this.log.error({ err, listener: this.listener, method: req.method, host: req.headers.host, path, source }, 'handling a request failed: the request was ended, the gateway goes on');
    if ('socket' in end) return void end.socket.destroy();
    const res = end.res;
    if (res.headersSent || res.destroyed) return void res.destroy();
    try {
      res.writeHead(ERROR_CODES.internal_error.status, ['content-type', 'application/json', 'x-sandgate-error', 'internal_error', 'content-length', String(INTERNAL.length)]);
      res.end(INTERNAL);
    } catch {
      res.destroy();
    }
  }
}

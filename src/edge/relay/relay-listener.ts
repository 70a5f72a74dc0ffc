import type { IncomingHttpHeaders as Http1Headers, IncomingMessage, Server, ServerResponse } from 'node:http';
import type { IncomingHttpHeaders, ServerHttp2Stream } from 'node:http2';
import type { Socket } from 'node:net';
import { deny, type Deny } from '../../domain/decide.js';
import type { RouteRequest } from '../../domain/route-key.js';
import type { Server as TlsServer } from 'node:tls';
import { closeGracefully, createStreamingServer, listenOn, type ServerTls } from '../../lib/http-listen.js';
import { RequestGuard } from '../../lib/request-guard.js';
import { ConnectionGuard } from '../../lib/connection-guard.js';
import type { Logger } from '../../observability/logger.js';
import type { RelayOpener } from '../../sessions/relay-opener.js';
import { respondDenial, writeDenial } from '../denial.js';
import { filterRequestHeaders, HOP_BY_HOP } from '../forwarding/forward-headers.js';
import { KEEP_ON_UPGRADE, spliceUpgrade, type Connect } from '../forwarding/websocket-tunnel.js';
import { GATEWAY_HEADER_PREFIX } from '../headers.js';
import { isDeny, requestTarget } from '../request-target.js';
import { exchange, relayDenial, relayStreamHost, type ExchangeOptions } from './relay-exchange.js';
import { fromNodeHttp, type ClientRequest, type ClientResponse } from '../forwarding/client-side.js';
import { respondGrpcDenial } from '../forwarding/grpc-denial.js';
import { H2Response, h2Request } from '../forwarding/h2-request.js';
import { h2cExchange, isGrpc } from '../forwarding/h2c-exchange.js';
import { DEFAULT_H2C_LIMITS, H2cPool, H2cSaturated, type H2cLimits } from '../forwarding/h2c-pool.js';
import { ALPN, Http2Beside } from '../../lib/tls/http2-beside.js';
import type { RelayCredentials } from './relay-credential.js';
import type { Exchange, ExchangeRecorder } from '../../observability/exchange.js';
import { acceptTunnels } from './relay-tunnel.js';
import { formatRelayTarget, parseRelayTarget, RELAY_AUTH_HEADER, RELAY_TARGET_HEADER, type RelayTarget } from './relay-headers.js';

/**
 * The relay listener (`--relay-port`, default 8082; TLS with the doors' certificates when they are set): where Envoy, or a peer gateway's embedded proxy,
 * sends a request for a relay-only sandbox whose supervisor session this gateway holds. The caller has
 * already decided; the listener reads the target (`x-sandgate-relay-target: <namespace>/<name>:<port>`),
 * checks that `x-sandgate-relay-auth` is a live credential minted for exactly that target
 * (relay-credential.ts, constant time), strips every `x-sandgate-*` header, and carries the request — or
 * the WebSocket upgrade — over a relay stream of the local session. A CONNECT with the same headers opens
 * a byte tunnel to the target instead (relay-tunnel.ts): a peer gateway's HTTP/2 to an h2c port.
 *
 * HTTP/2 is Envoy's way to an h2c port (the doors mark the decision `x-sandgate-upstream-protocol: h2c`):
 * with prior knowledge on the plain listener, by ALPN `h2` over TLS. Each stream is admitted exactly as an
 * HTTP/1.1 request and carried as the embedded proxy carries a request to an h2c port
 * (forwarding/h2c-exchange.ts): a stream on a pooled HTTP/2 session to the sandbox port, the sessions
 * running over relay streams of the local session, bounded per target (forwarding/h2c-pool.ts; past the
 * bound 429 `too_many_connections`, gRPC RESOURCE_EXHAUSTED). A gRPC request's denial is a gRPC status.
 * An extended CONNECT (a WebSocket over HTTP/2) is 501 `upgrade_not_supported`.
 *
 * Answers of its own: 401 `relay_unauthorized` (no, forged, other-target or expired credential; the
 * relay secret itself is not accepted), 400 `invalid_route` (no or bad target), 502
 * `sandbox_unreachable` (no session for the target here: it moved; the caller's next decision follows
 * it), 503 `relay_busy`, and the usual 502/504 when the sandbox refuses or does not answer.
 */

export interface RelayListenerOptions {
  readonly host: string;
  readonly port: number;
  /** Verifies the bound credentials Envoy and peer gateways present. */
  readonly credentials: RelayCredentials;
  readonly headersTimeoutMs: number;
  readonly idleTimeoutMs: number;
  /** Counts faults in the listener's handlers (sandgate_http_handler_errors_total{listener="relay"}). */
  readonly handlerErrors?: { inc(): void };
  /** Exchange records for the access log and tracing; absent when both are off. */
  readonly recorder?: ExchangeRecorder | undefined;
  /**
   * TLS with the doors pair (`--doors-tls-*`), a client certificate from `--doors-client-ca-file` required
   * when one is set: peers present theirs (relay-peer.ts), Envoy its own. Undefined: plain HTTP.
   */
  readonly tls?: ServerTls | undefined;
  /** Bounds on the HTTP/2 sessions to h2c ports (`--h2c-*`, as the embedded proxy's). */
  readonly h2c?: Partial<H2cLimits> | undefined;
  /** Connection cap and first-request timeouts (connection-guard.ts); default: the default limits. */
  readonly guard?: ConnectionGuard | undefined;
}

/** HTTP/2 limits toward Envoy: the HTTP/1.1 head limit, the embedded proxy's stream cap per connection. */
const H2_LIMITS = { maxConcurrentStreams: 128, maxHeaderListSize: 16 * 1024 };
/** Relay streams under the pool are opened for the pool's session, which no single request may abort. */
const NO_ABORT = new AbortController().signal;

const DROP: ReadonlySet<string> = new Set(HOP_BY_HOP);
/** With tracing on, the sandbox gets this listener's own `traceparent`, never the caller's. */
const DROP_TRACED: ReadonlySet<string> = new Set([...HOP_BY_HOP, 'traceparent']);
const UNAUTHORIZED_MESSAGE = 'The relay listener accepts only requests from this deployment\'s gateways and Envoy';
const EXPIRED_MESSAGE = 'The relay credential has expired: decide again';

export class RelayListener {
  private readonly server: Server;
  private readonly drop: ReadonlySet<string>;
  private readonly exchangeOptions: ExchangeOptions;
  private readonly guard: RequestGuard;
  private readonly h2: Http2Beside;
  /** HTTP/2 sessions to h2c ports, over relay streams of the local session. */
  readonly h2c: H2cPool;
  port = 0;

  constructor(
    private readonly streams: RelayOpener,
    private readonly opts: RelayListenerOptions,
    private readonly log: Logger,
  ) {
    this.drop = opts.recorder?.tracer !== undefined ? DROP_TRACED : DROP;
    const guard = (this.guard = new RequestGuard('relay', log, opts.handlerErrors));
    this.exchangeOptions = { headersTimeoutMs: opts.headersTimeoutMs, idleTimeoutMs: opts.idleTimeoutMs, guard };
    this.h2c = new H2cPool({ ...DEFAULT_H2C_LIMITS, ...opts.h2c });
    const secure = opts.tls !== undefined;
    this.server = createStreamingServer((req, res) => this.request(req, res), (req, socket, head) => this.upgrade(req, socket, head), guard, secure ? { ...opts.tls.options, ALPNProtocols: ALPN } : undefined);
    // A handshake without a certificate the client CA issued never reaches a handler: node:tls closes it.
    opts.tls?.attach(this.server as unknown as TlsServer);
    this.h2 = new Http2Beside(secure ? this.server : undefined, (stream, headers, ip) => this.stream(stream, headers, ip, secure), { ...H2_LIMITS, idleTimeoutMs: this.server.keepAliveTimeout });
    if (!secure) this.h2.priorKnowledge(this.server, opts.headersTimeoutMs);
    acceptTunnels(this.server, { admit: (req) => this.admit(req.headers, req.socket.remoteAddress), streams, log });
  }

  async start(): Promise<number> {
    this.port = await listenOn(this.server, this.opts.host, this.opts.port, this.opts.guard ?? new ConnectionGuard('relay'));
    return this.port;
  }

  /** Stops accepting, lets requests in flight finish for up to `graceMs`, then cuts the rest. */
  async close(graceMs: number): Promise<void> {
    await closeGracefully(this.server, graceMs, this.h2);
    this.h2c.close();
  }

  /** Authenticates and reads the target, or says why not. */
  private admit(headers: Http1Headers | IncomingHttpHeaders, source: string | undefined): RelayTarget | Deny {
    const target = parseRelayTarget(singleValue(headers[RELAY_TARGET_HEADER]));
    // The syntax of a target is public (docs/relay.md): a malformed one reveals nothing worth a secret.
    if (target === undefined) return deny('invalid_route', `${RELAY_TARGET_HEADER} must be <namespace>/<name>:<port>`);
    const check = this.opts.credentials.verify(headers[RELAY_AUTH_HEADER], formatRelayTarget(target));
    if (check === 'ok') return target;
    this.log.warn({ source, check }, 'relay request without a valid relay credential');
    return deny('relay_unauthorized', check === 'expired' ? EXPIRED_MESSAGE : UNAUTHORIZED_MESSAGE);
  }

  /**
   * What every entry point carries, once admitted: the path, the target, the headers without any
   * `x-sandgate-*` (with this hop's `traceparent` when traced), and the target's relay stream.
   */
  private admitted(url: string | undefined, rawHeaders: readonly string[], headers: Http1Headers | IncomingHttpHeaders, source: string | undefined, x: Exchange | undefined, keep?: ReadonlySet<string>): Admitted | Deny {
    const rt = requestTarget(url, rawHeaders);
    if (isDeny(rt)) return rt;
    const t = this.admit(headers, source);
    if ('allow' in t) return t;
    const out = filterRequestHeaders(rawHeaders, this.drop, GATEWAY_HEADER_PREFIX, keep);
    if (x !== undefined) toTarget(x, t, out);
    return { path: rt.path, target: t, headers: out, open: (signal) => this.streams.openRelayStream(t.namespace, t.name, t.port, signal) };
  }

  private request(req: IncomingMessage, res: ServerResponse): void {
    const x = this.begin(req);
    const refuse = (d: Deny): void => {
      const bytes = respondDenial(res, d, req.headers.accept);
      x?.denied(d.status, d.code, bytes);
    };
    const a = this.admitted(req.url, req.rawHeaders, req.headers, req.socket.remoteAddress, x);
    if (isDeny(a)) return refuse(a);
    const fail = (err: unknown): void => {
      this.log.debug({ err, target: a.target }, 'relay failed before the response');
      refuse(relayDenial(err));
    };
    exchange(fromNodeHttp(req), res, a.path, a.headers, a.open, this.exchangeOptions, fail, x);
  }

  private upgrade(req: IncomingMessage, socket: Socket, head: Buffer): void {
    socket.on('error', () => socket.destroy());
    const x = this.begin(req);
    const route: RouteRequest = { headers: req.headers as RouteRequest['headers'], host: req.headers.host, path: req.url };
    const refuse = (d: Deny): void => {
      const bytes = writeDenial(socket, d, route);
      x?.denied(d.status, d.code, bytes);
    };
    const a = this.admitted(req.url, req.rawHeaders, req.headers, req.socket.remoteAddress, x, KEEP_ON_UPGRADE);
    if (isDeny(a)) return refuse(a);
    x?.endsWithTunnel(socket);
    spliceUpgrade(req, socket, head, a.path, a.headers, a.open, this.opts.idleTimeoutMs, (err) => refuse(relayDenial(err)), undefined, x === undefined ? undefined : (status) => x.answered(status));
  }

  /** An HTTP/2 stream from Envoy: a request to an h2c port. */
  private stream(stream: ServerHttp2Stream, h: IncomingHttpHeaders, clientIp: string, secure: boolean): void {
    const req = h2Request(stream, h, clientIp, secure);
    const res = new H2Response(stream);
    this.guard.run(req, res, () => this.h2cRequest(req, res, h));
  }

  private h2cRequest(req: ClientRequest, res: ClientResponse, h: IncomingHttpHeaders): void {
    const x = this.opts.recorder?.begin('relay', { method: req.method, target: req.url, headers: req.headers, client: req.clientIp, peer: req.clientIp });
    const grpc = isGrpc(req.headers['content-type']);
    const refuse = (d: Deny): void => {
      const bytes = grpc ? respondGrpcDenial(res, d) : respondDenial(res, d, req.headers.accept);
      x?.denied(d.status, d.code, bytes);
    };
    // HTTP/2 here reaches h2c ports only, and a WebSocket to one is not carried (nor is a CONNECT tunnel: that is HTTP/1.1's).
    if (req.method === 'CONNECT') return refuse(deny('upgrade_not_supported'));
    const a = this.admitted(req.url, req.rawHeaders, h, req.clientIp, x);
    if (isDeny(a)) return refuse(a);
    const t = a.target;
    h2cExchange(this.h2c, relayStreamHost(t.namespace, t.name, t.port), () => a.open(NO_ABORT), req, res, a.path, a.headers, this.exchangeOptions, {
      fail: (err) => {
        this.log.debug({ err, target: t }, 'h2c relay failed before the response');
        refuse(err instanceof H2cSaturated ? deny('too_many_connections', err.message, undefined, 1) : relayDenial(err));
      },
      record: x,
    });
  }

  private begin(req: IncomingMessage): Exchange | undefined {
    return this.opts.recorder?.begin('relay', { method: req.method ?? 'GET', target: req.url ?? '/', headers: req.headers as Record<string, string | undefined>, client: req.socket.remoteAddress ?? '', peer: req.socket.remoteAddress ?? '' });
  }
}

interface Admitted {
  readonly path: string;
  readonly target: RelayTarget;
  readonly headers: string[];
  readonly open: Connect;
}

/** The record of an admitted relay request: its target, and the stream it leaves on (with its `traceparent`). */
function toTarget(x: Exchange, t: RelayTarget, headers: string[]): void {
  x.namespace = t.namespace;
  x.name = t.name;
  x.port = t.port;
  const traceparent = x.upstreamStarted(relayStreamHost(t.namespace, t.name, t.port));
  if (traceparent !== undefined) headers.push('traceparent', traceparent);
}

function singleValue(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? undefined : v;
}

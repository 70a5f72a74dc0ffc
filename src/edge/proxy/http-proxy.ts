import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { IncomingHttpHeaders, ServerHttp2Stream } from 'node:http2';
import type { Socket } from 'node:net';
import type { Server as TlsServer } from 'node:tls';
import { Agent, type Dispatcher } from 'undici';
import { deny, type Allow, type Decision, type Deny } from '../../domain/decide.js';
import type { RouteRequest } from '../../domain/route-key.js';
import { closeGracefully, createStreamingServer, listenOn, PROXIED_METHODS, refuseConnect, type ConnectionFront } from '../../lib/http-listen.js';
import { RequestGuard } from '../../lib/request-guard.js';
import { ListenerGuards } from '../../lib/connection-guard.js';
import type { CertificateSet } from '../../lib/tls/certificate-store.js';
import type { PeerTls } from '../../lib/tls/peer-tls.js';
import { ALPN, Http2Beside } from '../../lib/tls/http2-beside.js';
import type { Logger } from '../../observability/logger.js';
import type { RelayOpener } from '../../sessions/relay-opener.js';
import { abortOnClose, type Decider } from '../decider.js';
import { respondDenial, writeDenial } from '../denial.js';
import { exchange, type ExchangeOptions } from '../relay/relay-exchange.js';
import type { RelayCredentials } from '../relay/relay-credential.js';
import { RELAY_AUTH_HEADER, RELAY_TARGET_HEADER } from '../relay/relay-headers.js';
import { relayRoutes } from '../relay/relay-routes.js';
import { RelayPeers } from '../relay/relay-peer.js';
import { isDeny, requestTarget, type RequestTarget } from '../request-target.js';
import { ConnectionLimit } from './connection-limit.js';
import { forwardFailure, type ForwardHop } from '../forwarding/failure-codes.js';
import { RecordedUpstreamExchange, UpstreamExchange, type ExchangeOwner } from './upstream-exchange.js';
import type { Exchange } from '../../observability/exchange.js';
import { dropSet, forwardRequestHeaders, stripLinkCookie, type ForwardContext } from '../forwarding/forward-headers.js';
import { mayHoldLinkCookie } from '../../domain/link-cookie.js';
import { spliceUpgrade, upgradeHeaders, withoutOrigin } from '../forwarding/websocket-tunnel.js';
import { planUpstream, type RelayRoutes, type UpstreamPlan } from '../forwarding/upstream-plan.js';
import { fromNodeHttp, type ClientRequest, type ClientResponse } from '../forwarding/client-side.js';
import { HttpFront } from '../http-front.js';
import { proxyFrontHandler } from './proxy-front.js';
import type { ActivityRecorder } from '../../lifecycle/activity-recorder.js';
import { H2Response, h2Request } from '../forwarding/h2-request.js';
import { tunnelExtendedConnect } from './h2-websocket.js';
import { httpsRedirect } from './https-redirect.js';
import { DEFAULT_H2C_LIMITS, H2cPool, H2cSaturated, type H2cLimits } from '../forwarding/h2c-pool.js';
import { h2cExchange, isGrpc } from '../forwarding/h2c-exchange.js';
import { respondGrpcDenial } from '../forwarding/grpc-denial.js';

/**
 * The embedded data plane: an HTTP/1.1 proxy on `--proxy-port` that makes the same decide() as the Envoy
 * doors and carries the request itself with undici — one keep-alive pool per upstream (undici's Agent
 * keeps a Pool per origin), bodies streamed both ways with backpressure, responses written as they
 * arrive (SSE and chunked responses are not buffered), WebSocket upgrades tunnelled byte for byte.
 *
 * With certificates from the store, a second listener (`--proxy-tls-port`) speaks TLS: HTTP/1.1 there is read
 * exactly as on the plain port, HTTP/2 (ALPN `h2`) streams become the same requests (h2-request.ts), and
 * RFC 8441 extended CONNECT carries WebSockets (h2-websocket.ts). The plain port may instead redirect
 * every request to HTTPS.
 *
 * A relay decision (a sandbox with no inbound network) goes to the relay listener of the gateway
 * holding the sandbox's supervisor session, with a credential bound to the target and the target header; when that gateway
 * is this one, the request rides the local session's relay stream directly, with no network hop.
 */

/** How the proxy reaches relay-only sandboxes. */
export interface ProxyRelay {
  /** This gateway's id: a relay decision whose session is held here uses `streams` directly. */
  readonly gatewayId: string;
  /** Mints the target-bound credential presented to a peer's relay listener. */
  readonly credentials: RelayCredentials;
  /** This gateway's supervisor sessions (undefined when its supervisor endpoint is off). */
  readonly streams: RelayOpener | undefined;
  /** TLS to peers' relay listeners (the doors pair and CA); undefined: they speak plain HTTP. */
  readonly peerTls?: PeerTls | undefined;
}

export interface ProxyOptions {
  readonly host: string;
  readonly port: number;
  readonly upstreamHeader: string;
  /** Request headers never forwarded to a sandbox (credentials meant for the gateway). */
  readonly stripHeaders: readonly string[];
  readonly stripOriginOnUpgrade: boolean;
  readonly connectTimeoutMs: number;
  readonly headersTimeoutMs: number;
  /** Longest silence on an open request or response body before both sides are closed. */
  readonly idleTimeoutMs: number;
  /** Relay-only sandboxes; without it a relay decision answers 502 sandbox_unreachable. */
  readonly relay?: ProxyRelay;
  /** Concurrent requests and WebSockets per sandbox (0 = no cap); past it 429 too_many_connections. */
  readonly maxConnectionsPerSandbox?: number;
  /** Records bytes on open streams as activity (the request itself is recorded by the decider). */
  readonly activity?: ActivityRecorder;
  /**
   * `--upstream-connect-retry-ms`: for this long after a sandbox became Ready, a bodyless request whose
   * connection is refused is sent again (its app often listens a moment after the sandbox is Ready);
   * `now` is the view's clock.
   */
  readonly connectRetry?: { readonly ms: number; readonly now: () => number };
  /** The TLS listener: its port and the certificates it serves. */
  readonly tls?: { readonly port: number; readonly pairs: CertificateSet };
  /** The plain port answers every request with a 308 to `https://<host>:<port>` (443: no port in the URL; 0: the TLS listener's port). */
  readonly redirectHttpsPort?: number;
  /** Counts faults in the proxy's handlers (sandgate_http_handler_errors_total{listener="proxy"}). */
  readonly handlerErrors?: { inc(): void };
  /** Bounds on the HTTP/2 sessions to h2c sandbox ports (forwarding/h2c-pool.ts). */
  readonly h2c?: Partial<H2cLimits>;
  /** The guards of the plain (`proxy`) and TLS (`proxy_tls`) ports; default: one set with the default limits. */
  readonly guards?: ListenerGuards;
}

/** The TLS listener: HTTP/1.1 (node:http and the proxy's front) and HTTP/2 beside it. */
interface SecureListener {
  readonly server: Server;
  /** Both fronts, closed together. */
  readonly fronts: ConnectionFront;
  readonly h2: Http2Beside;
}

/** HTTP/2 limits of the TLS listener: the HTTP/1.1 head limit (http-front.ts), nginx's stream cap. */
const H2_LIMITS = { maxConcurrentStreams: 128, maxHeaderListSize: 16 * 1024 };

/** Pause between two connection attempts to a sandbox whose app is not listening yet. */
const CONNECT_RETRY_STEP_MS = 100;

/** `OPTIONS *` asks about the server itself: the proxy is not the sandbox's server, and forwards none. */
const TRACEPARENT = 'traceparent';

const ASTERISK = deny('invalid_route', 'The embedded proxy forwards no asterisk-form request (OPTIONS *)');
/** A CONNECT stream that is not a WebSocket (RFC 8441) asks for a tunnel: no client-facing listener offers one. */
const H2_CONNECT = deny('method_not_allowed', 'CONNECT is not supported: sandgate opens no tunnels (WebSockets: extended CONNECT with :protocol websocket)');

export class EmbeddedProxy implements ExchangeOwner {
  private readonly server: Server;
  /** Reads bodyless GET and HEAD requests itself (proxy-front.ts); node:http reads the rest. Undefined when the plain port redirects. */
  readonly front: HttpFront<unknown> | undefined;
  private readonly secure: SecureListener | undefined;
  /** HTTP/2 with prior knowledge on the plain port (h2c: gRPC clients without TLS); undefined when it redirects. */
  private readonly plainH2: Http2Beside | undefined;
  private readonly agent: Agent;
  private readonly drop: ReadonlySet<string>;
  /** In-flight requests and tunnels per sandbox. */
  readonly connections: ConnectionLimit;
  /** Every request's handling runs under it, and so do the listeners it hangs (request-guard.ts). */
  private readonly guard: RequestGuard;
  private readonly relayExchange: ExchangeOptions;
  /** HTTP/2 sessions to h2c sandbox ports. */
  readonly h2c: H2cPool;
  /** How peers' relay listeners are reached. */
  private readonly peers: RelayPeers;
  /** Connection caps and first-request timeouts of both ports. */
  readonly guards: ListenerGuards;
  /** The relay half of the upstream plan; undefined: a relay decision answers 502 sandbox_unreachable. */
  private readonly relay: RelayRoutes | undefined;
  port = 0;
  tlsPort = 0;

  constructor(
    private readonly decider: Decider,
    private readonly opts: ProxyOptions,
    private readonly log: Logger,
  ) {
    // A client's copies of the relay headers never travel on: a relay hop gets the gateway's own.
    this.connections = new ConnectionLimit(opts.maxConnectionsPerSandbox ?? 0);
    this.guards = opts.guards ?? new ListenerGuards();
    // With tracing on, the sandbox gets the proxy's own `traceparent` (its span's), never the client's.
    const traced = decider.recorder?.tracer !== undefined ? [TRACEPARENT] : [];
    this.drop = dropSet({ upstreamHeader: opts.upstreamHeader, strip: [...opts.stripHeaders, RELAY_AUTH_HEADER, RELAY_TARGET_HEADER, ...traced] });
    this.peers = new RelayPeers(opts.relay?.peerTls, opts.connectTimeoutMs);
    this.relay = opts.relay === undefined ? undefined : relayRoutes({ ...opts.relay, peers: this.peers, connectTimeoutMs: opts.connectTimeoutMs });
    const connect = { timeout: opts.connectTimeoutMs, noDelay: true };
    this.agent = new Agent({
      connect: this.peers.dispatcherConnector(connect) ?? connect,
      headersTimeout: opts.headersTimeoutMs,
      bodyTimeout: opts.idleTimeoutMs,
      keepAliveTimeout: 4_000,
    });
    this.guard = new RequestGuard('proxy', log, opts.handlerErrors);
    this.relayExchange = { headersTimeoutMs: opts.headersTimeoutMs, idleTimeoutMs: opts.idleTimeoutMs, guard: this.guard };
    this.h2c = new H2cPool({ ...DEFAULT_H2C_LIMITS, ...opts.h2c });
    if (opts.redirectHttpsPort !== undefined && opts.redirectHttpsPort >= 0) {
      const to = opts.redirectHttpsPort;
      this.server = createServer({ noDelay: true }, httpsRedirect(() => (to === 0 ? this.tlsPort : to)));
      this.server.keepAliveTimeout = 65_000;
      refuseConnect(this.server, PROXIED_METHODS);
    } else {
      this.server = createStreamingServer((req, res) => this.request(fromNodeHttp(req), res), (req, socket, head) => this.upgrade(req, socket, head), this.guard);
      this.front = new HttpFront(this.server, proxyFrontHandler((req, res) => this.request(req, res)), log);
      const h2 = new Http2Beside(undefined, (stream, headers, ip) => this.stream(stream, headers, ip, false), { ...H2_LIMITS, idleTimeoutMs: this.server.keepAliveTimeout });
      this.front.h2c = (socket) => h2.accept(socket);
      this.plainH2 = h2;
    }
    if (opts.tls !== undefined) this.secure = this.secureListener(opts.tls.pairs);
  }

  private secureListener(pairs: CertificateSet): SecureListener {
    const server = createStreamingServer(
      (req, res) => this.request(fromNodeHttp(req, true), res),
      (req, socket, head) => this.upgrade(req, socket, head, true),
      this.guard,
      { ...pairs.serverOptions(), ALPNProtocols: ALPN },
    );
    pairs.attach(server as unknown as TlsServer);
    const front = new HttpFront(server, proxyFrontHandler((req, res) => this.request(req, res), true), this.log, 'secureConnection');
    const h2 = new Http2Beside(server, (stream, headers, ip) => this.stream(stream, headers, ip), { ...H2_LIMITS, idleTimeoutMs: server.keepAliveTimeout });
    const fronts: ConnectionFront = {
      closeIdle: () => (front.closeIdle(), h2.closeIdle()),
      closeAll: () => (front.closeAll(), h2.closeAll()),
    };
    return { server, fronts, h2 };
  }

  /** The plain port (not when `port` is negative: TLS only). */
  async start(): Promise<number> {
    if (this.opts.port >= 0) this.port = await listenOn(this.server, this.opts.host, this.opts.port, this.guards.for('proxy'));
    return this.port;
  }

  /** The TLS port. */
  async startTls(): Promise<number> {
    this.tlsPort = await listenOn(this.secure!.server, this.opts.host, this.opts.tls!.port, this.guards.for('proxy_tls'));
    return this.tlsPort;
  }

  async closeTls(graceMs: number): Promise<void> {
    await closeGracefully(this.secure!.server, graceMs, this.secure!.fronts);
  }

  /** Closes the plain port, then the upstream pool (close the TLS port first). */
  async close(graceMs: number): Promise<void> {
    const h2 = this.plainH2;
    const fronts: ConnectionFront | undefined =
      this.front === undefined || h2 === undefined ? this.front : { closeIdle: () => (this.front!.closeIdle(), h2.closeIdle()), closeAll: () => (this.front!.closeAll(), h2.closeAll()) };
    if (this.server.listening) await closeGracefully(this.server, graceMs, fronts);
    this.h2c.close();
    await this.agent.close();
  }

  /** The request as the decision reads it: absolute-form routed on its authority (request-target.ts). */
  private route(req: ClientRequest | IncomingMessage, t?: RequestTarget): RouteRequest {
    const headers = req.headers as RouteRequest['headers'];
    // A link's cookie is Secure when the request came over TLS (the TLS port, or HTTP/2 on it).
    const secure = 'clientIp' in req ? req.secure === true : (req.socket as { encrypted?: boolean }).encrypted === true;
    return t === undefined ? { headers, host: headers.host, path: req.url, method: req.method, secure } : { headers, host: t.host, path: t.path, method: req.method, secure };
  }

  /** The forwarded headers without sandgate's link cookie (when links are on and the request has it). */
  private withoutLinkCookie(headers: string[], cookie: string | undefined): string[] {
    return this.decider.links !== undefined && mayHoldLinkCookie(cookie) ? stripLinkCookie(headers) : headers;
  }

  private context(req: ClientRequest): ForwardContext {
    return { clientIp: req.clientIp, proto: req.secure === true ? 'https' : 'http', host: req.headers.host };
  }

  /** Decides, waiting through a readiness gap while the client is still there. */
  private decideFor(route: RouteRequest, gone: { once(event: 'close', fn: () => void): unknown }, then: (d: Decision) => void, x?: Exchange): void {
    void this.decider.decideAndAnswer('proxy', route, gone, abortOnClose, then, x);
  }

  /** Every request, whichever listener and front read it: a throw in its handling ends it alone. */
  private request(req: ClientRequest, res: ClientResponse): void {
    this.guard.run(req, res, () => this.handle(req, res));
  }

  private handle(req: ClientRequest, res: ClientResponse): void {
    const x = this.decider.recorder?.begin('proxy', { method: req.method, target: req.url, headers: req.headers, client: req.clientIp, peer: req.clientIp });
    const t = requestTarget(req.url, req.rawHeaders);
    if (isDeny(t)) return this.refuse(res, t, this.route(req), x);
    if (t.path === '*') return this.refuse(res, ASTERISK, this.route(req), x);
    const route = this.route(req, t);
    // The answer may come after a readiness wait, outside the guarded call.
    this.decideFor(
      route,
      res,
      this.guard.bind(req, res, (d: Decision) => {
        if (!d.allow) return this.refuse(res, d, route, x);
        if (!this.connections.acquire(d.entry.key)) return this.refuse(res, deny('too_many_connections', undefined, d.entry, 1), route, x);
        this.forward(req, res, d, route, x);
      }),
      x,
    );
  }

  /** Takes a connection slot for the decided sandbox until `closes` closes (nothing to give back without a cap). */
  private take(d: Allow, closes: { on(event: 'close', fn: () => void): unknown }): boolean {
    if (!this.connections.acquire(d.entry.key)) return false;
    this.releaseOnClose(d, closes);
    return true;
  }

  private releaseOnClose(d: Allow, closes: { on(event: 'close', fn: () => void): unknown }): void {
    if (!this.connections.limited) return;
    // `on`, not `once`: a response or socket closes once, and once's wrapper and removal cost on every request.
    closes.on('close', () => this.connections.release(d.entry.key));
  }

  private refuse(res: ClientResponse, d: Deny, route: RouteRequest, x?: Exchange): void {
    const a = this.decider.answer(route, d);
    const bytes = isGrpc(route.headers['content-type']) ? respondGrpcDenial(res, a) : respondDenial(res, a, route.headers.accept, route.headers['sec-fetch-mode']);
    x?.denied(a.status, a.code, bytes);
  }

  /** Carries an allowed request whose connection slot is taken: the exchange, or the relay path, gives it back on close. */
  private forward(req: ClientRequest, res: ClientResponse, d: Allow, route: RouteRequest, x: Exchange | undefined): void {
    const headers = this.withoutLinkCookie(forwardRequestHeaders(req.rawHeaders, this.drop, this.context(req)), req.headers.cookie);
    // Origin-form always (RFC 9112 §3.2.2): an absolute-form target was reduced to its path.
    const path = d.target.path ?? route.path ?? '/';
    const plan = planUpstream(d, this.relay, this.opts.connectTimeoutMs);
    if (d.entry.h2cPorts?.has(d.target.port) === true) return this.forwardH2c(req, res, d, plan, path, headers, route, x);
    const pooled = isDeny(plan) ? undefined : plan.pooled;
    // A pooled exchange gives the slot back itself (closed()); nothing else would.
    if (pooled === undefined) this.releaseOnClose(d, res);
    if (isDeny(plan)) return this.refuse(res, plan, route, x);
    for (const [k, v] of plan.hopHeaders) headers.push(k, v);
    if (pooled !== undefined) return this.send(req, res, d, path, headers, pooled, route, x);
    if (x !== undefined) injectTraceparent(headers, x, plan.host);
    const fail = (err: unknown): void => {
      this.log.debug({ err, upstream: plan.host }, 'relay failed before the response');
      this.refuse(res, plan.denial(err), route, x);
    };
    exchange(req, res, path, headers, plan.open, this.relayExchange, fail, x);
  }

  /**
   * Carries a request to a port declared h2c over HTTP/2 (h2c-exchange.ts), on a pooled session whose
   * connection the plan opens: to the sandbox, over a relay stream of the local session, or through a tunnel
   * to the relay listener of the peer holding the session. Its connection slot goes back on close.
   */
  private forwardH2c(req: ClientRequest, res: ClientResponse, d: Allow, plan: UpstreamPlan | Deny, path: string, headers: string[], route: RouteRequest, x: Exchange | undefined): void {
    this.releaseOnClose(d, res);
    if (isDeny(plan)) return this.refuse(res, plan, route, x);
    const via = plan.h2c;
    if (x !== undefined) injectTraceparent(headers, x, via.key);
    const activity = this.opts.activity;
    h2cExchange(this.h2c, via.key, via.open, req, res, path, headers, this.relayExchange, {
      fail: (err) => {
        this.log.debug({ err, upstream: via.key }, 'h2c upstream failed before the response');
        this.refuse(res, err instanceof H2cSaturated ? deny('too_many_connections', err.message, d.entry, 1) : plan.denial(err), route, x);
      },
      streamed: activity === undefined ? undefined : () => activity.stream(d),
      record: x,
    });
  }

  /** Sends the request to `d.upstream` (a sandbox, or a peer's relay listener) through the pool. */
  private send(req: ClientRequest, res: ClientResponse, d: Allow, path: string, headers: string[], pooled: { origin: string; hop: ForwardHop }, route: RouteRequest, x: Exchange | undefined): void {
    const hop = pooled.hop;
    let handler: UpstreamExchange;
    if (x === undefined) handler = new UpstreamExchange(this, req, res, d, route, hop);
    else {
      injectTraceparent(headers, x, d.upstream);
      handler = new RecordedUpstreamExchange(this, req, res, d, route, hop, x);
    }
    handler.options = { origin: pooled.origin, path, method: req.method as Dispatcher.HttpMethod, headers, body: req.body };
    this.agent.dispatch(handler.options, handler);
  }

  upstreamFailed(x: UpstreamExchange, err: Error): void {
    if (this.retryRefused(x, err)) return;
    const code = forwardFailure(x.hop, err);
    // A peer's relay listener that fails the TLS handshake either way is a deployment's misconfiguration.
    if (x.hop === 'peer_gateway' && code === 'upstream_error') this.log.warn({ err, upstream: x.decision.upstream, code }, "a peer gateway's relay listener failed before the response");
    else this.log.debug({ err, upstream: x.decision.upstream, code }, 'upstream failed before the response');
    this.refuse(x.res, deny(code, undefined, x.decision.entry), x.route, x instanceof RecordedUpstreamExchange ? x.record : undefined);
  }

  closed(x: UpstreamExchange): void {
    this.connections.release(x.decision.entry.key);
  }

  /**
   * Sends a bodyless request again, a moment later, when the sandbox refused the connection within
   * `--upstream-connect-retry-ms` of becoming Ready. True when it will be retried.
   */
  private retryRefused(x: UpstreamExchange, err: Error): boolean {
    const retry = this.opts.connectRetry;
    if (retry === undefined || retry.ms <= 0 || x.hop !== 'sandbox' || x.req.body !== null || x.options === undefined || x.res.destroyed) return false;
    if ((err as { code?: unknown }).code !== 'ECONNREFUSED') return false;
    const since = this.decider.view.readySince(x.decision.entry.key);
    const left = since === undefined ? 0 : since + retry.ms - retry.now();
    if (left <= 0) return false;
    const options = x.options;
    this.log.debug({ upstream: x.decision.upstream, leftMs: left }, 'the sandbox refused the connection after a wake; retrying');
    setTimeout(() => {
      if (!x.res.destroyed) this.agent.dispatch(options, x);
    }, Math.min(CONNECT_RETRY_STEP_MS, left));
    return true;
  }

  streamed(x: UpstreamExchange): void {
    this.opts.activity?.stream(x.decision);
  }

  /** Data on a tunnelled WebSocket of `d` counts as its activity. */
  private tunnelActivity(d: Allow): (() => void) | undefined {
    const activity = this.opts.activity;
    return activity === undefined ? undefined : () => activity.stream(d);
  }

  private upgrade(req: IncomingMessage, socket: Socket, head: Buffer, secure?: boolean): void {
    socket.on('error', () => socket.destroy());
    const x = this.decider.recorder?.begin('proxy', { method: req.method ?? 'GET', target: req.url ?? '/', headers: req.headers as ClientRequest['headers'], client: socket.remoteAddress ?? '', peer: socket.remoteAddress ?? '' });
    const refuse = x === undefined ? writeDenial : (s: Socket, d: Deny, r: RouteRequest): void => x.denied(d.status, d.code, writeDenial(s, d, r));
    const t = requestTarget(req.url, req.rawHeaders);
    if (isDeny(t)) return void refuse(socket, t, this.route(req));
    const route = this.route(req, t);
    const then = (d: Decision): void => {
      if (socket.destroyed) return;
      if (!d.allow) return void refuse(socket, d, route);
      if (!this.take(d, socket)) return void refuse(socket, deny('too_many_connections', undefined, d.entry, 1), route);
      const headers = this.withoutLinkCookie(upgradeHeaders(req, this.drop, this.context(fromNodeHttp(req, secure)), this.opts.stripOriginOnUpgrade), req.headers.cookie);
      const plan = planUpstream(d, this.relay, this.opts.connectTimeoutMs);
      if (isDeny(plan)) return void refuse(socket, plan, route);
      for (const [k, v] of plan.hopHeaders) headers.push(k, v);
      if (x !== undefined) {
        injectTraceparent(headers, x, plan.host);
        x.endsWithTunnel(socket);
      }
      const seen = x === undefined ? undefined : (status: number) => x.answered(status);
      spliceUpgrade(req, socket, head, d.target.path ?? t.path, headers, plan.open, this.opts.idleTimeoutMs, (err) => refuse(socket, plan.denial(err), route), this.tunnelActivity(d), seen);
    };
    this.decideFor(route, socket, this.guard.bindUpgrade(req, socket, then), x);
  }

  /** An HTTP/2 stream on the TLS port (or h2c on the plain one): a request like any other, or a WebSocket (extended CONNECT). */
  private stream(stream: ServerHttp2Stream, headers: IncomingHttpHeaders, clientIp: string, secure = true): void {
    const req = h2Request(stream, headers, clientIp, secure);
    const res = new H2Response(stream);
    if (req.method !== 'CONNECT') return this.request(req, res);
    // Recorded as an HTTP/1.1 upgrade is: one record per stream, ended when the stream closes.
    const x = this.decider.recorder?.begin('proxy', { method: req.method, target: req.url, headers: req.headers, client: req.clientIp, peer: req.clientIp });
    if (headers[':protocol'] !== 'websocket') return this.refuse(res, H2_CONNECT, this.route(req), x);
    const t = requestTarget(req.url, req.rawHeaders);
    if (isDeny(t)) return this.refuse(res, t, this.route(req), x);
    const route = this.route(req, t);
    this.decideFor(
      route,
      res,
      this.guard.bind(req, res, (d: Decision) => {
        if (stream.destroyed) return;
        if (!d.allow) return this.refuse(res, d, route, x);
        // The decision read this stream as a request (its route has no upgrade field): an h2c port is refused here.
        if (d.entry.h2cPorts?.has(d.target.port) === true) return this.refuse(res, deny('upgrade_not_supported', undefined, d.entry), route, x);
        if (!this.take(d, stream)) return this.refuse(res, deny('too_many_connections', undefined, d.entry, 1), route, x);
        const raw = this.opts.stripOriginOnUpgrade ? withoutOrigin(req.rawHeaders) : req.rawHeaders;
        const headers = this.withoutLinkCookie(forwardRequestHeaders(raw, this.drop, this.context(req)), req.headers.cookie);
        const plan = planUpstream(d, this.relay, this.opts.connectTimeoutMs);
        if (isDeny(plan)) return this.refuse(res, plan, route, x);
        for (const [k, v] of plan.hopHeaders) headers.push(k, v);
        if (x !== undefined) {
          injectTraceparent(headers, x, plan.host);
          x.endsWithStream(stream);
        }
        tunnelExtendedConnect(stream, d.target.path ?? t.path, headers, plan.open, this.opts.idleTimeoutMs, (err) => this.refuse(res, plan.denial(err), route, x), this.tunnelActivity(d), x);
      }),
      x,
    );
  }
}

/** The request leaves for `host`: with tracing on, it carries the upstream span's `traceparent`. */
function injectTraceparent(headers: string[], x: Exchange, host: string): void {
  const traceparent = x.upstreamStarted(host);
  if (traceparent !== undefined) headers.push(TRACEPARENT, traceparent);
}

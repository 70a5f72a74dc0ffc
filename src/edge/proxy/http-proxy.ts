import type { IncomingMessage, Server } from 'node:http';
import type { Socket } from 'node:net';
import { Agent, type Dispatcher } from 'undici';
import { deny, type Allow, type Decision, type Deny } from '../../domain/decide.js';
import type { RouteRequest } from '../../domain/route-key.js';
import { closeGracefully, createStreamingServer, listenOn } from '../../lib/http-listen.js';
import type { Logger } from '../../observability/logger.js';
import type { RelayOpener } from '../../sessions/relay-opener.js';
import { abortOnClose, type Decider } from '../decider.js';
import { respondDenial, writeDenial } from '../denial.js';
import { exchange, relayDenial } from '../relay/relay-exchange.js';
import type { RelayCredentials } from '../relay/relay-credential.js';
import { RELAY_AUTH_HEADER, RELAY_TARGET_HEADER, relayHeaders } from '../relay/relay-headers.js';
import { isDeny, requestTarget, type RequestTarget } from '../request-target.js';
import { ConnectionLimit } from './connection-limit.js';
import { forwardFailure, type ForwardHop } from '../forwarding/failure-codes.js';
import { UpstreamExchange, type ExchangeOwner } from './upstream-exchange.js';
import { dropSet, forwardRequestHeaders, stripLinkCookie, type ForwardContext } from '../forwarding/forward-headers.js';
import { hasLinkCookie } from '../../domain/link.js';
import { spliceUpgrade, tcpConnect, upgradeHeaders, type Connect } from '../forwarding/websocket-tunnel.js';
import { sandboxKey } from '../../domain/sandbox.js';
import { fromNodeHttp, type ClientRequest, type ClientResponse } from '../forwarding/client-side.js';
import { HttpFront } from '../http-front.js';
import { proxyFrontHandler } from './proxy-front.js';

/**
 * The embedded data plane: an HTTP/1.1 proxy on `--proxy-port` that makes the same decide() as the Envoy
 * doors and carries the request itself with undici — one keep-alive pool per upstream (undici's Agent
 * keeps a Pool per origin), bodies streamed both ways with backpressure, responses written as they
 * arrive (SSE and chunked responses are not buffered), WebSocket upgrades tunnelled byte for byte.
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
}

/** `OPTIONS *` asks about the server itself: the proxy is not the sandbox's server, and forwards none. */
const ASTERISK = deny('invalid_route', 'The embedded proxy forwards no asterisk-form request (OPTIONS *)');

export class EmbeddedProxy implements ExchangeOwner {
  private readonly server: Server;
  /** Reads bodyless GET and HEAD requests itself (proxy-front.ts); node:http reads the rest. */
  readonly front: HttpFront<unknown>;
  private readonly agent: Agent;
  private readonly drop: ReadonlySet<string>;
  /** In-flight requests and tunnels per sandbox. */
  readonly connections: ConnectionLimit;
  port = 0;

  constructor(
    private readonly decider: Decider,
    private readonly opts: ProxyOptions,
    private readonly log: Logger,
  ) {
    // A client's copies of the relay headers never travel on: a relay hop gets the gateway's own.
    this.connections = new ConnectionLimit(opts.maxConnectionsPerSandbox ?? 0);
    this.drop = dropSet({ upstreamHeader: opts.upstreamHeader, strip: [...opts.stripHeaders, RELAY_AUTH_HEADER, RELAY_TARGET_HEADER] });
    this.agent = new Agent({
      connect: { timeout: opts.connectTimeoutMs, noDelay: true },
      headersTimeout: opts.headersTimeoutMs,
      bodyTimeout: opts.idleTimeoutMs,
      keepAliveTimeout: 4_000,
    });
    this.server = createStreamingServer((req, res) => this.request(fromNodeHttp(req), res), (req, socket, head) => this.upgrade(req, socket, head));
    this.front = new HttpFront(this.server, proxyFrontHandler((req, res) => this.request(req, res)), log);
  }

  async start(): Promise<number> {
    this.port = await listenOn(this.server, this.opts.host, this.opts.port);
    return this.port;
  }

  async close(graceMs: number): Promise<void> {
    await closeGracefully(this.server, graceMs, this.front);
    await this.agent.close();
  }

  /** The request as the decision reads it: absolute-form routed on its authority (request-target.ts). */
  private route(req: ClientRequest | IncomingMessage, t?: RequestTarget): RouteRequest {
    const headers = req.headers as RouteRequest['headers'];
    return t === undefined ? { headers, host: headers.host, path: req.url, method: req.method } : { headers, host: t.host, path: t.path, method: req.method };
  }

  /** The forwarded headers without sandgate's link cookie (when links are on and the request has it). */
  private withoutLinkCookie(headers: string[], cookie: string | undefined): string[] {
    return this.decider.links !== undefined && hasLinkCookie(cookie) ? stripLinkCookie(headers) : headers;
  }

  private context(req: ClientRequest): ForwardContext {
    return { clientIp: req.clientIp, proto: 'http', host: req.headers.host };
  }

  /** Decides, waiting through a readiness gap while the client is still there. */
  private decideFor(route: RouteRequest, gone: { once(event: 'close', fn: () => void): unknown }, then: (d: Decision) => void): void {
    void this.decider.decideAndAnswer('proxy', route, gone, abortOnClose, then);
  }

  private request(req: ClientRequest, res: ClientResponse): void {
    const t = requestTarget(req.url, req.rawHeaders);
    if (isDeny(t)) return this.refuse(res, t, this.route(req));
    if (t.path === '*') return this.refuse(res, ASTERISK, this.route(req));
    const route = this.route(req, t);
    this.decideFor(route, res, (d) => {
      if (!d.allow) return this.refuse(res, d, route);
      if (!this.connections.acquire(d.entry.key)) return this.refuse(res, deny('too_many_connections', undefined, d.entry, 1), route);
      this.forward(req, res, d, route);
    });
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

  private refuse(res: ClientResponse, d: Deny, route: RouteRequest): void {
    respondDenial(res, this.decider.answer(route, d), route.headers.accept, route.headers['sec-fetch-mode']);
  }

  /** Carries an allowed request whose connection slot is taken: the exchange, or the relay path, gives it back on close. */
  private forward(req: ClientRequest, res: ClientResponse, d: Allow, route: RouteRequest): void {
    const headers = this.withoutLinkCookie(forwardRequestHeaders(req.rawHeaders, this.drop, this.context(req)), req.headers.cookie);
    // Origin-form always (RFC 9112 §3.2.2): an absolute-form target was reduced to its path.
    const path = d.target.path ?? route.path ?? '/';
    if (!d.relay) return this.send(req, res, d, path, headers, 'sandbox', route);
    const local = this.localRelay(d);
    if (local !== undefined) this.releaseOnClose(d, res);
    if (local === 'unreachable') return this.refuse(res, deny('sandbox_unreachable', undefined, d.entry), route);
    if (local !== undefined) {
      const timeouts = { headersTimeoutMs: this.opts.headersTimeoutMs, idleTimeoutMs: this.opts.idleTimeoutMs };
      return exchange(req, res, path, headers, local, timeouts, (err) => {
        this.log.debug({ err, sandbox: sandboxKey(d.entry.namespace, d.entry.name) }, 'relay failed before the response');
        this.refuse(res, relayDenial(err, d.entry), route);
      });
    }
    for (const [k, v] of relayHeaders(d, this.opts.relay!.credentials)) headers.push(k, v);
    this.send(req, res, d, path, headers, 'peer_gateway', route);
  }

  /**
   * For a relay decision: the local session's stream opener when this gateway holds the session,
   * 'unreachable' when relaying is off here, undefined when the session is on a peer.
   */
  private localRelay(d: Allow): Connect | 'unreachable' | undefined {
    const relay = this.opts.relay;
    if (relay === undefined) return 'unreachable';
    if (d.entry.relayOwner !== relay.gatewayId) return undefined;
    const streams = relay.streams;
    if (streams === undefined) return 'unreachable';
    return (signal) => streams.openRelayStream(d.entry.namespace, d.entry.name, d.target.port, signal);
  }

  /** Sends the request to `d.upstream` (a sandbox, or a peer's relay listener) through the pool. */
  private send(req: ClientRequest, res: ClientResponse, d: Allow, path: string, headers: string[], hop: ForwardHop, route: RouteRequest): void {
    this.agent.dispatch(
      { origin: 'http://' + d.upstream, path, method: req.method as Dispatcher.HttpMethod, headers, body: req.body },
      new UpstreamExchange(this, req, res, d, route, hop),
    );
  }

  upstreamFailed(x: UpstreamExchange, err: Error): void {
    const code = forwardFailure(x.hop, err);
    this.log.debug({ err, upstream: x.decision.upstream, code }, 'upstream failed before the response');
    this.refuse(x.res, deny(code, undefined, x.decision.entry), x.route);
  }

  closed(x: UpstreamExchange): void {
    this.connections.release(x.decision.entry.key);
  }

  private upgrade(req: IncomingMessage, socket: Socket, head: Buffer): void {
    socket.on('error', () => socket.destroy());
    const t = requestTarget(req.url, req.rawHeaders);
    if (isDeny(t)) return writeDenial(socket, t, this.route(req));
    const route = this.route(req, t);
    this.decideFor(route, socket, (d) => {
      if (socket.destroyed) return;
      if (!d.allow) return writeDenial(socket, d, route);
      if (!this.take(d, socket)) return writeDenial(socket, deny('too_many_connections', undefined, d.entry, 1), route);
      const headers = this.withoutLinkCookie(upgradeHeaders(req, this.drop, this.context(fromNodeHttp(req)), this.opts.stripOriginOnUpgrade), req.headers.cookie);
      const path = d.target.path ?? t.path;
      const idle = this.opts.idleTimeoutMs;
      if (!d.relay) {
        const open = tcpConnect(d.upstream, this.opts.connectTimeoutMs);
        return spliceUpgrade(req, socket, head, path, headers, open, idle, (err) => writeDenial(socket, deny(forwardFailure('sandbox', err), undefined, d.entry), route));
      }
      const local = this.localRelay(d);
      if (local === 'unreachable') return writeDenial(socket, deny('sandbox_unreachable', undefined, d.entry), route);
      if (local !== undefined) return spliceUpgrade(req, socket, head, path, headers, local, idle, (err) => writeDenial(socket, relayDenial(err, d.entry), route));
      for (const [k, v] of relayHeaders(d, this.opts.relay!.credentials)) headers.push(k, v);
      const open = tcpConnect(d.upstream, this.opts.connectTimeoutMs);
      spliceUpgrade(req, socket, head, path, headers, open, idle, (err) => writeDenial(socket, deny(forwardFailure('peer_gateway', err), undefined, d.entry), route));
    });
  }
}

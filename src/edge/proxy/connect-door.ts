import type { IncomingMessage, Server } from 'node:http';
import type { Duplex } from 'node:stream';
import { deny, type Allow, type Decision, type Deny } from '../../domain/decide.js';
import type { RouteRequest } from '../../domain/route-key.js';
import type { RequestGuard } from '../../lib/request-guard.js';
import type { ActivityRecorder } from '../../lifecycle/activity-recorder.js';
import type { Logger } from '../../observability/logger.js';
import { abortOnClose, type Decider } from '../decider.js';
import { writeDenial } from '../denial.js';
import { spliceTcp } from '../forwarding/tcp-splice.js';
import { planUpstream, type RelayRoutes } from '../forwarding/upstream-plan.js';
import { isDeny } from '../request-target.js';
import type { ConnectionLimit } from './connection-limit.js';

/**
 * HTTP/1.1 `CONNECT` at the embedded proxy (RFC 9110 §9.3.6; docs/tunnels.md): a TCP tunnel to a port a
 * sandbox declares `tcp`, named in the authority-form target — `<name>.<namespace>.<base-domain>:<port>`
 * or `<id>.<base-domain>:<port>`. The request is decided like any other (the access check without links,
 * the readiness wait and wake, the typed denials, all before a byte is carried), the bytes go where the
 * upstream plan says, and from the `200` on the connection carries the port's bytes both ways.
 */

export interface TunnelBounds {
  /** `--tunnels-per-namespace` (0 = no cap): open tunnels per namespace on this gateway. */
  readonly perNamespace: ConnectionLimit;
  /** `--tunnel-idle-timeout` in ms (0 = never). */
  readonly idleTimeoutMs: number;
}

/** What the door needs of the proxy it serves. */
export interface ConnectDoorDeps {
  readonly decider: Decider;
  readonly guard: RequestGuard;
  readonly relay: RelayRoutes | undefined;
  readonly connectTimeoutMs: number;
  /** The proxy's per-sandbox cap (a tunnel holds a slot like a WebSocket). */
  readonly connections: ConnectionLimit;
  readonly tunnels: TunnelBounds;
  readonly activity: ActivityRecorder | undefined;
  readonly log: Logger;
}

const ESTABLISHED = 'HTTP/1.1 200 Connection Established\r\n\r\n';

/** Serves CONNECT on `server` (plain or TLS) in place of the refusal other listeners give. */
export function serveConnect(server: Server, deps: ConnectDoorDeps, secure: boolean): void {
  server.removeAllListeners('connect');
  server.on('connect', (req: IncomingMessage, socket: Duplex, head: Buffer) => deps.guard.runUpgrade(req, socket, () => connect(deps, req, socket, head, secure)));
}

/** The request as the decision reads it: the tunnel's authority from the request target. */
export function tunnelRoute(req: IncomingMessage, secure: boolean): RouteRequest {
  const headers = req.headers as RouteRequest['headers'];
  return { headers, host: req.url, path: undefined, method: 'CONNECT', secure, tunnel: true };
}

function connect(deps: ConnectDoorDeps, req: IncomingMessage, socket: Duplex, head: Buffer, secure: boolean): void {
  socket.on('error', () => socket.destroy());
  // Nothing is read from the client until the tunnel is up: what it sent early waits in its socket.
  socket.pause();
  openTunnel(deps, req, socket, tunnelRoute(req, secure), (d, up) => {
    socket.write(ESTABLISHED);
    if (head.length > 0) up.write(head);
    spliceTcp(socket, up, deps.tunnels.idleTimeoutMs, { activity: activityOf(deps, d) });
    socket.resume();
  });
}

/** Bytes either way count as the sandbox port's activity. */
export function activityOf(deps: ConnectDoorDeps, d: Allow): (() => void) | undefined {
  const activity = deps.activity;
  return activity === undefined ? undefined : () => activity.stream(d);
}

/**
 * The one admission of every tunnel carrier (CONNECT, the WebSocket tunnel): the decision (with its wait
 * and wake), the namespace's and the sandbox's places, and the sandbox port's byte stream from the upstream
 * plan — or the typed refusal, written on `socket` before any byte is carried. `carry` gets the open
 * stream while the client is still there.
 */
export function openTunnel(deps: ConnectDoorDeps, req: IncomingMessage, socket: Duplex, route: RouteRequest, carry: (d: Allow, up: Duplex) => void): void {
  const refuse = (d: Deny): void => void writeDenial(socket, deps.decider.answer(route, d), route);
  const then = (d: Decision): void => {
    if (socket.destroyed) return;
    if (!d.allow) return refuse(d);
    const namespace = d.entry.namespace;
    if (!deps.tunnels.perNamespace.acquire(namespace)) return refuse(deny('too_many_tunnels', undefined, d.entry, 1));
    if (!deps.connections.acquire(d.entry.key)) {
      deps.tunnels.perNamespace.release(namespace);
      return refuse(deny('too_many_connections', undefined, d.entry, 1));
    }
    // A closed tunnel frees its places at once, however it ended.
    socket.once('close', () => {
      deps.tunnels.perNamespace.release(namespace);
      deps.connections.release(d.entry.key);
    });
    const plan = planUpstream(d, deps.relay, deps.connectTimeoutMs);
    if (isDeny(plan)) return refuse(plan);
    plan.bytes().then(
      (up) => {
        if (socket.destroyed) return void up.destroy();
        carry(d, up);
      },
      (err: unknown) => {
        deps.log.debug({ err, upstream: plan.host }, 'tunnel failed to open');
        if (!socket.destroyed) refuse(plan.denial(err));
      },
    );
  };
  void deps.decider.decideAndAnswer('proxy', route, socket, abortOnClose, deps.guard.bindUpgrade(req, socket, then));
}

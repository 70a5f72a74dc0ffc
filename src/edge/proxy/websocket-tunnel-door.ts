import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { createWebSocketStream, WebSocketServer } from 'ws';
import { isDnsLabel, parsePort } from '../../domain/labels.js';
import type { RouteRequest } from '../../domain/route-key.js';
import { spliceTcp } from '../forwarding/tcp-splice.js';
import { activityOf, openTunnel, type ConnectDoorDeps } from './connect-door.js';

/**
 * The WebSocket tunnel at the embedded proxy (docs/tunnels.md), for clients behind proxies that pass only
 * HTTP(S): `GET /v1/sandboxes/{namespace}/{name}/ports/{port}/tunnel` with a WebSocket upgrade; binary
 * messages carry the port's bytes both ways. It is admitted exactly as a CONNECT is (connect-door.ts:
 * the decision, the places, the upstream plan, the typed refusals as plain HTTP answers before the
 * handshake), and the WebSocket's stream is spliced to the port with the same backpressure and idle timeout.
 */

const PATH = /^\/v1\/sandboxes\/([^/?#]+)\/([^/?#]+)\/ports\/([^/?#]+)\/tunnel(?:\?[^#]*)?$/;

/** The largest message the tunnel accepts from a client: bytes are streamed, so a frame need not be large. */
const MAX_PAYLOAD = 1024 * 1024;

/** True when `url` is the WebSocket tunnel's path (whatever it names). */
export function isTunnelPath(url: string | undefined): boolean {
  return url !== undefined && url.startsWith('/v1/sandboxes/') && PATH.test(url);
}

/**
 * The tunnel's target as the decision reads a tunnel: the authority `<name>.<namespace>.<base-domain>:<port>`.
 * A segment that is not a DNS label (or a port) makes an authority no sandbox has — a 404, as for CONNECT.
 */
export function websocketTunnelRoute(req: IncomingMessage, baseDomain: string, secure: boolean): RouteRequest {
  const m = PATH.exec(req.url ?? '');
  const [namespace, name, port] = m === null ? [] : [m[1]!, m[2]!, m[3]!];
  const ok = namespace !== undefined && name !== undefined && port !== undefined && isDnsLabel(namespace) && isDnsLabel(name) && parsePort(port) !== 0;
  const host = ok ? `${name}.${namespace}.${baseDomain}:${port}` : undefined;
  return { headers: req.headers as RouteRequest['headers'], host, path: undefined, method: 'GET', secure, tunnel: true };
}

export class WebSocketTunnelDoor {
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: MAX_PAYLOAD, perMessageDeflate: false });

  constructor(
    private readonly deps: ConnectDoorDeps,
    private readonly baseDomain: string,
  ) {}

  /** Handles an upgrade whose path isTunnelPath(). */
  upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, secure: boolean): void {
    socket.on('error', () => socket.destroy());
    const route = websocketTunnelRoute(req, this.baseDomain, secure);
    openTunnel(this.deps, req, socket, route, (d, up) => {
      // A handshake ws refuses (a missing key, a bad version) closes the socket: the port's stream with it.
      socket.once('close', () => up.destroy());
      this.wss.handleUpgrade(req, socket, head, (ws) => {
        // Binary messages in, binary messages out; a text message is a protocol error (close 1003).
        ws.on('message', (_data, binary) => {
          if (!binary) ws.close(1003, 'binary messages only');
        });
        const bytes = createWebSocketStream(ws);
        spliceTcp(bytes, up, this.deps.tunnels.idleTimeoutMs, { activity: activityOf(this.deps, d) });
      });
    });
  }

  close(): void {
    this.wss.close();
  }
}

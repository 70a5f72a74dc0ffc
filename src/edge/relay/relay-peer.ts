import { buildConnector } from 'undici';
import type { ConnectionOptions } from 'node:tls';
import type { PeerTls } from '../../lib/tls/peer-tls.js';
import { tcpConnect, type Connect } from '../forwarding/websocket-tunnel.js';

/**
 * How the embedded proxy reaches a peer gateway's relay listener (docs/relay.md, "TLS between
 * gateways"): plain HTTP, or — when the relay listeners speak TLS (`--doors-tls-cert-file`) — TLS with this
 * gateway's doors pair as its client certificate and the peer checked as PeerTls says. The lease carries
 * `host:port` alone: every gateway of a deployment runs the same doors settings, so each knows how its
 * peers listen.
 */
export class RelayPeers {
  private connector: buildConnector.connector | undefined;
  private connectorFor: ConnectionOptions | undefined;

  constructor(
    private readonly tls: PeerTls | undefined,
    private readonly connectTimeoutMs: number,
  ) {}

  /** The origin a request to the peer listening at `address` (`host:port`) is dispatched to. */
  origin(address: string): string {
    return (this.tls === undefined ? 'http://' : 'https://') + address;
  }

  /** A connection for a tunnel (a WebSocket) to the peer listening at `address`. */
  connect(address: string): Connect {
    return tcpConnect(address, this.connectTimeoutMs, this.tls?.options());
  }

  /**
   * undici's connector for `https:` origins (the peers): built again when the client options change, so a
   * rotated pair is presented from the next connection on (pooled connections keep theirs until they close).
   */
  dispatcherConnector(base: buildConnector.BuildOptions): buildConnector.connector | undefined {
    const tls = this.tls;
    if (tls === undefined) return undefined;
    const plain = buildConnector(base);
    return (opts, cb) => {
      if (opts.protocol !== 'https:') return plain(opts, cb);
      const o = tls.options();
      if (o !== this.connectorFor || this.connector === undefined) {
        this.connector = buildConnector({ ...base, ...o } as buildConnector.BuildOptions);
        this.connectorFor = o;
      }
      this.connector(opts, cb);
    };
  }
}

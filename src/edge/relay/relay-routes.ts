import { deny, type Allow, type Deny } from '../../domain/decide.js';
import type { RelayOpener } from '../../sessions/relay-opener.js';
import { forwardFailure } from '../forwarding/failure-codes.js';
import type { PeerRoute, RelayRoutes } from '../forwarding/upstream-plan.js';
import type { RelayCredentials } from './relay-credential.js';
import { relayDenial, relayStreamHost } from './relay-exchange.js';
import { relayHeaders } from './relay-headers.js';
import type { RelayPeers } from './relay-peer.js';
import { openPeerTunnel, TunnelRefused } from './relay-tunnel.js';

/**
 * The relay half of the upstream plan (forwarding/upstream-plan.ts): relay streams of this gateway's
 * supervisor sessions, and peers' relay listeners reached with a credential bound to the target.
 */

export interface RelayRoutesOptions {
  /** This gateway's id: a relay decision whose session is held here uses `streams` directly. */
  readonly gatewayId: string;
  /** Mints the target-bound credential presented to a peer's relay listener. */
  readonly credentials: RelayCredentials;
  /** This gateway's supervisor sessions (undefined when its supervisor endpoint is off). */
  readonly streams: RelayOpener | undefined;
  readonly peers: RelayPeers;
  readonly connectTimeoutMs: number;
}

export function relayRoutes(o: RelayRoutesOptions): RelayRoutes {
  const streams = o.streams;
  return {
    gatewayId: o.gatewayId,
    streams: streams === undefined ? undefined : (d) => (signal) => streams.openRelayStream(d.entry.namespace, d.entry.name, d.target.port, signal),
    streamHost: (d) => relayStreamHost(d.entry.namespace, d.entry.name, d.target.port),
    streamDenial: (err, d) => relayDenial(err, d.entry),
    peer: (d) => peerRoute(d, o),
  };
}

function peerRoute(d: Allow, o: RelayRoutesOptions): PeerRoute {
  const connect = o.peers.connect(d.upstream);
  return {
    origin: o.peers.origin(d.upstream),
    headers: () => relayHeaders(d, o.credentials),
    connect,
    // A tunnel for each new h2c session to the target, each with a fresh credential.
    tunnel: () => openPeerTunnel(() => connect(NO_ABORT), d.upstream, relayHeaders(d, o.credentials), o.connectTimeoutMs),
    denial: (err) => peerDenial(err, d),
  };
}

/** A peer's typed refusal of a tunnel keeps its code (`relay_busy` worth a retry); anything else is the hop's failure. */
function peerDenial(err: unknown, d: Allow): Deny {
  if (err instanceof TunnelRefused) return deny(err.denial.code, undefined, d.entry, err.denial.code === 'relay_busy' ? 1 : undefined);
  return deny(forwardFailure('peer_gateway', err), undefined, d.entry);
}

/** Never aborted: a pooled HTTP/2 session outlives the request that opened it. */
const NO_ABORT = new AbortController().signal;

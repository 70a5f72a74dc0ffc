import { deny, type Allow, type Deny } from '../../domain/decide.js';
import { forwardFailure, type ForwardHop } from './failure-codes.js';
import type { OpenTransport } from './h2c-pool.js';
import { tcpConnect, type Connect } from './websocket-tunnel.js';

/**
 * The one answer to "where do an allowed request's bytes go, and how is that path opened" (docs/relay.md),
 * asked by every carrier — HTTP/1.1, a WebSocket upgrade, an HTTP/2 stream, an RFC 8441 WebSocket, a
 * request to an h2c port — so that each only translates between its transport and the plan:
 *
 * - `sandbox`: the sandbox's address, over TCP;
 * - `own_relay`: a relay stream of the supervisor session this gateway holds (no network hop);
 * - `peer_relay`: the relay listener of the peer gateway holding the session, with a credential bound to
 *   the target in the hop headers;
 * - unreachable: a relay decision this gateway cannot carry (relaying off here) answers 502
 *   `sandbox_unreachable`.
 */

export type UpstreamKind = 'sandbox' | 'own_relay' | 'peer_relay';

export type HopHeaders = readonly (readonly [string, string])[];

export interface UpstreamPlan {
  readonly kind: UpstreamKind;
  /** The upstream as records and traces name it: the sandbox address, the relay stream, the peer's relay listener. */
  readonly host: string;
  /** What the hop adds to the forwarded request: a peer's relay target and credential; nothing otherwise. */
  readonly hopHeaders: HopHeaders;
  /** A byte stream for a tunnel (a WebSocket), or for the one request an own relay carries. */
  readonly open: Connect;
  /** The pooled HTTP/1.1 path (one keep-alive pool per origin); undefined for an own relay, which rides `open`. */
  readonly pooled: { readonly origin: string; readonly hop: ForwardHop } | undefined;
  /** The HTTP/2 session transport to an h2c port: its pool key and how a session's connection opens. */
  readonly h2c: { readonly key: string; readonly open: OpenTransport };
  /** The denial a failure to reach the upstream, before any answer, gets. */
  denial(err: unknown): Deny;
}

/** How relay-only sandboxes are reached (relay/relay-routes.ts): this gateway's sessions and its peers' relay listeners. */
export interface RelayRoutes {
  readonly gatewayId: string;
  /** A relay stream of this gateway's session to the decided port; undefined when its supervisor endpoint is off. */
  readonly streams: ((d: Allow) => Connect) | undefined;
  /** `upstream_host` of a request carried over a relay stream of this gateway's session. */
  streamHost(d: Allow): string;
  /** The denial for a relay stream that failed. */
  streamDenial(err: unknown, d: Allow): Deny;
  /** The relay listener of the peer at `d.upstream`. */
  peer(d: Allow): PeerRoute;
}

export interface PeerRoute {
  readonly origin: string;
  /** The target and a fresh credential for it. */
  headers(): HopHeaders;
  readonly connect: Connect;
  /** A CONNECT tunnel through the peer's relay listener (its own fresh credential each time), for h2c sessions. */
  readonly tunnel: OpenTransport;
  denial(err: unknown): Deny;
}

/** Never aborted: a pooled HTTP/2 session outlives the request that opened it. */
const NO_ABORT = new AbortController().signal;
const NO_HEADERS: HopHeaders = Object.freeze([]);

/** Where the bytes of `d` go: a plan, or the denial of a relay decision this gateway cannot carry. */
export function planUpstream(d: Allow, relay: RelayRoutes | undefined, connectTimeoutMs: number): UpstreamPlan | Deny {
  if (!d.relay) return new SandboxUpstream(d, connectTimeoutMs);
  if (relay === undefined) return deny('sandbox_unreachable', undefined, d.entry);
  if (d.entry.relayOwner !== relay.gatewayId) return new PeerUpstream(d, relay.peer(d), relay.streamHost(d));
  const streams = relay.streams;
  if (streams === undefined) return deny('sandbox_unreachable', undefined, d.entry);
  return new OwnRelayUpstream(d, streams(d), relay);
}

class SandboxUpstream implements UpstreamPlan {
  readonly kind = 'sandbox';
  readonly hopHeaders = NO_HEADERS;
  readonly host: string;

  constructor(
    private readonly d: Allow,
    private readonly connectTimeoutMs: number,
  ) {
    this.host = d.upstream;
  }

  get open(): Connect {
    return tcpConnect(this.host, this.connectTimeoutMs);
  }

  get pooled(): { origin: string; hop: ForwardHop } {
    return { origin: 'http://' + this.host, hop: 'sandbox' };
  }

  get h2c(): { key: string; open: OpenTransport } {
    const connect = this.open;
    return { key: this.host, open: () => connect(NO_ABORT) };
  }

  denial(err: unknown): Deny {
    return deny(forwardFailure('sandbox', err), undefined, this.d.entry);
  }
}

class OwnRelayUpstream implements UpstreamPlan {
  readonly kind = 'own_relay';
  readonly hopHeaders = NO_HEADERS;
  readonly pooled = undefined;
  readonly host: string;

  constructor(
    private readonly d: Allow,
    readonly open: Connect,
    private readonly relay: RelayRoutes,
  ) {
    this.host = relay.streamHost(d);
  }

  get h2c(): { key: string; open: OpenTransport } {
    const open = this.open;
    return { key: this.host, open: () => open(NO_ABORT) };
  }

  denial(err: unknown): Deny {
    return this.relay.streamDenial(err, this.d);
  }
}

class PeerUpstream implements UpstreamPlan {
  readonly kind = 'peer_relay';
  readonly host: string;

  constructor(
    d: Allow,
    private readonly peer: PeerRoute,
    /** The relay stream the peer opens: with the peer, the key of this target's h2c sessions. */
    private readonly stream: string,
  ) {
    this.host = d.upstream;
  }

  get hopHeaders(): HopHeaders {
    return this.peer.headers();
  }

  get open(): Connect {
    return this.peer.connect;
  }

  get pooled(): { origin: string; hop: ForwardHop } {
    return { origin: this.peer.origin, hop: 'peer_gateway' };
  }

  get h2c(): { key: string; open: OpenTransport } {
    return { key: `${this.host}>${this.stream}`, open: this.peer.tunnel };
  }

  denial(err: unknown): Deny {
    return this.peer.denial(err);
  }
}

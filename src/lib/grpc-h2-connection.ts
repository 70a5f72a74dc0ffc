import type { ServerHttp2Session } from 'node:http2';
import { firstRequest } from './connection-guard.js';

/**
 * What grpc-h2-server.ts bounds per HTTP/2 connection, and the connection's own lifecycle: a handshake
 * timeout, an idle timeout, and a grace after GOAWAY.
 */

export interface GrpcServerLimits {
  /** SETTINGS_MAX_CONCURRENT_STREAMS (RFC 9113 §6.5.2); streams past it are refused (REFUSED_STREAM). */
  readonly maxConcurrentStreams: number;
  /** Request bytes one stream may hold: a message still arriving plus what its handler keeps (`hold`). */
  readonly maxStreamBufferBytes: number;
  /** The same, summed over a connection's streams. */
  readonly maxConnectionBufferBytes: number;
  /** A connection that has not sent the HTTP/2 preface and its SETTINGS within this time is closed. */
  readonly handshakeTimeoutMs: number;
  /** A connection without an open stream for this long gets GOAWAY and is closed. */
  readonly idleTimeoutMs: number;
  /** A connection that sent or was sent GOAWAY is closed this long after, whatever streams it still has. */
  readonly goawayGraceMs: number;
}

const MIB = 1024 * 1024;

/** The defaults: 100 streams as Envoy and grpc-go; room for two, and four, messages of grpc-js's 4 MiB maximum. */
export const GRPC_SERVER_LIMITS: GrpcServerLimits = Object.freeze({
  maxConcurrentStreams: 100,
  maxStreamBufferBytes: 8 * MIB,
  maxConnectionBufferBytes: 16 * MIB,
  handshakeTimeoutMs: 10_000,
  idleTimeoutMs: 300_000,
  goawayGraceMs: 30_000,
});

const enum Phase {
  /** Waiting for the client's preface and SETTINGS. */
  Handshake,
  Open,
  /** GOAWAY sent or received: closed after the grace, streams or not. */
  GoingAway,
}

/** One HTTP/2 connection: its open streams, the request bytes its calls hold, and its one timer. */
export class Connection {
  streams = 0;
  buffered = 0;
  private phase = Phase.Handshake;
  private timer: NodeJS.Timeout | undefined = undefined;

  /**
   * `accepted`: the connection as the listener accepted it, until its first stream, which ends the
   * listener's request-header timeout (connection-guard.ts).
   */
  constructor(
    readonly session: ServerHttp2Session,
    readonly limits: GrpcServerLimits,
    private accepted?: object,
  ) {
    this.arm(limits.handshakeTimeoutMs);
  }

  /** The client's SETTINGS arrived (RFC 9113 §3.4: its preface ends with them). */
  settled(): void {
    if (this.phase !== Phase.Handshake) return;
    this.phase = Phase.Open;
    if (this.streams === 0) this.arm(this.limits.idleTimeoutMs);
    else this.disarm();
  }

  opened(): void {
    this.streams++;
    if (this.accepted !== undefined) {
      firstRequest(this.accepted);
      this.accepted = undefined;
    }
    if (this.phase === Phase.GoingAway) return;
    this.phase = Phase.Open;
    this.disarm();
  }

  closed(): void {
    this.streams--;
    if (this.streams === 0 && this.phase === Phase.Open) this.arm(this.limits.idleTimeoutMs);
  }

  goingAway(): void {
    if (this.phase === Phase.GoingAway) return;
    this.phase = Phase.GoingAway;
    this.arm(this.limits.goawayGraceMs);
  }

  ended(): void {
    this.disarm();
  }

  expire(): void {
    this.timer = undefined;
    if (this.phase !== Phase.Open) {
      this.session.destroy();
      return;
    }
    // Idle: GOAWAY (node closes the socket at once, having no streams), and the grace in case it does not.
    this.goingAway();
    this.session.close();
  }

  private arm(ms: number): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = setTimeout(onConnectionTimer, ms, this);
    this.timer.unref();
  }

  private disarm(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
  }
}

function onConnectionTimer(conn: Connection): void {
  conn.expire();
}

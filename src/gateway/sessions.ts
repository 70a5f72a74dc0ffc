import type { Config } from '../config/schema.js';
import { startFailed } from '../config/start-errors.js';
import { namespaceShare } from '../domain/namespace-share.js';
import { sandboxKey } from '../domain/sandbox.js';
import type { Lifecycle } from '../lib/lifecycle.js';
import type { Logger } from '../observability/logger.js';
import type { PresenceRecord, PresenceStore } from '../sessions/presence/presence-store.js';
import type { RelayOpener } from '../sessions/relay-opener.js';
import { RelayError, type RelayStream } from '../sessions/relay-stream.js';
import { Rebalancer } from '../sessions/rebalancer.js';
import { SupervisorServer } from '../sessions/supervisor-server.js';
import type { Core } from './core.js';
import { startListener } from './doors.js';

/**
 * The sessions: the presence store (made once the relay listener's address is known: it goes into the
 * lease), the hand-over at shutdown, and the supervisor endpoint that writes presence.
 */

/**
 * Relay streams over this gateway's supervisor sessions, for the relay listener and the proxy. Those
 * start before the supervisor server can exist (the relay listener's address goes into the presence
 * lease the server writes to), so the streams open through this until the server is attached; before
 * that, and when the endpoint is off, no session is held here.
 */
export class SessionStreams implements RelayOpener {
  private server: SupervisorServer | undefined;

  attach(server: SupervisorServer): void {
    this.server = server;
  }

  openRelayStream(namespace: string, name: string, port: number, signal?: AbortSignal): Promise<RelayStream> {
    return this.server?.openRelayStream(namespace, name, port, signal) ?? Promise.reject(new RelayError('no_session', 'the supervisor endpoint is off on this gateway'));
  }
}

type SessionsSlice = Pick<
  Config,
  | 'listenHost'
  | 'supervisorPort'
  | 'supervisorSecretFile'
  | 'heartbeatIntervalMs'
  | 'heartbeatMisses'
  | 'helloTimeoutMs'
  | 'supervisorMaxFrameBytes'
  | 'maxSessions'
  | 'maxSessionsPerSource'
  | 'relayMaxStreamsPerSandbox'
  | 'relayMaxStreams'
  | 'relayMaxStreamsPerNamespace'
  | 'relayOpenTimeoutMs'
  | 'handoverTimeoutMs'
  | 'rebalanceIntervalMs'
  | 'rebalanceMaxMoves'
  | 'shutdownTimeoutMs'
>;

export interface SessionsDeps {
  readonly gatewayId: string;
  readonly core: Core;
  /** Made by the caller, not yet started. */
  readonly presence: PresenceStore;
  readonly relayAddress: string;
  /** True when the core's supervisor keys were given rather than read from `--supervisor-secret-file` (then the file is not watched). */
  readonly keysGiven: boolean;
  readonly streams: SessionStreams;
  readonly log: Logger;
}

/** Starts presence (mirrored into the view), the hand-over, then the supervisor endpoint when keys are set. */
export async function startSessions(life: Lifecycle, config: SessionsSlice, deps: SessionsDeps): Promise<SupervisorServer | undefined> {
  const { gatewayId, presence, relayAddress, log } = deps;
  const { view, metrics, supervisorKeys: keys } = deps.core;
  const sessionLog = log.child({ part: 'sessions' });
  await life.start(
    'presence',
    async () => {
      view.setRelayResolver((id) => (id === gatewayId ? relayAddress : presence.gatewayInfo?.(id)?.relay));
      presence.onChange((ns, name, record) => view.setPresence(ns, name, presenceOf(record)));
      try {
        await presence.start();
      } catch (err) {
        // Whatever it opened before failing goes with it.
        await presence.close({ release: false }).catch(() => undefined);
        throw startFailed('--presence', 'the presence store', err);
      }
      for (const r of presence.list()) view.setPresence(r.namespace, r.name, presenceOf(r));
    },
    () => presence.close({ release: true }).catch((err: unknown) => sessionLog.warn({ err }, 'presence release failed')),
  );
  // Supervisors are told "service restart" and reconnect elsewhere. This gateway's records stay (and its
  // sandboxes Ready everywhere) until the new claims are seen or a bound passes; then the lease and the
  // records go in one step (presence stop), so failover never waits for the lease TTL.
  await life.start(
    'hand-over',
    () => undefined,
    async (_, deadline) => {
      if (presence.kind !== 'redis') return;
      const held = [...presence.list()].filter((r) => r.gatewayId === gatewayId);
      await awaitTakeover(presence, gatewayId, held, Math.min(config.handoverTimeoutMs, config.shutdownTimeoutMs / 2, deadline.remainingMs()));
    },
  );
  if (keys === undefined) return undefined;
  const at = { host: config.listenHost, port: config.supervisorPort };
  return startListener(
    life,
    '--supervisor-port',
    at,
    async () => {
      const supervisors = new SupervisorServer(
        {
          ...at,
          keys,
          heartbeatIntervalMs: config.heartbeatIntervalMs,
          heartbeatMisses: config.heartbeatMisses,
          helloTimeoutMs: config.helloTimeoutMs,
          maxFrameBytes: config.supervisorMaxFrameBytes,
          maxSessions: config.maxSessions,
          maxSessionsPerSource: config.maxSessionsPerSource,
          handlerErrors: metrics.handlerErrors('supervisor'),
          // Rotation at runtime: a key removed from the file closes the sessions it signed within one heartbeat interval.
          keysFile: !deps.keysGiven && config.supervisorSecretFile !== '' ? config.supervisorSecretFile : undefined,
          relay: {
            maxStreamsPerSandbox: config.relayMaxStreamsPerSandbox,
            maxStreamsPerNamespace: namespaceShare(config.relayMaxStreamsPerNamespace, config.relayMaxStreams),
            maxStreams: config.relayMaxStreams,
            openTimeoutMs: config.relayOpenTimeoutMs,
          },
          tls: deps.core.certificates.supervisor,
          guard: deps.core.listeners.for('supervisor'),
        },
        presence,
        sessionLog,
      );
      deps.streams.attach(supervisors);
      await supervisors.start();
      metrics.watchSessions(supervisors);
      const rebalancer =
        presence.kind === 'redis' && config.rebalanceIntervalMs > 0
          ? new Rebalancer({ gatewayId, intervalMs: config.rebalanceIntervalMs, maxMoves: config.rebalanceMaxMoves, log: sessionLog }, presence, supervisors)
          : undefined;
      rebalancer?.start();
      return { supervisors, rebalancer };
    },
    async ({ supervisors, rebalancer }, graceMs) => {
      rebalancer?.stop();
      // Drain through the same moves as rebalancing, when peers can take the sessions: supervisors that
      // follow `move` keep their sandboxes Ready throughout; the others are told 1012 as before.
      const peers = (presence.gatewayLeases?.() ?? []).filter((l) => l.gatewayId !== gatewayId);
      if (peers.length > 0) await supervisors.drain(peers.map((l) => l.info.supervisor), Math.min(config.handoverTimeoutMs, config.shutdownTimeoutMs / 2, graceMs / 2));
      await supervisors.close();
    },
  ).then(({ supervisors }) => supervisors);
}

/** Resolves once every sandbox in `held` shows a session on another gateway, or after `ms`. */
function awaitTakeover(presence: PresenceStore, gatewayId: string, held: readonly PresenceRecord[], ms: number): Promise<void> {
  const pending = new Set(held.map((r) => sandboxKey(r.namespace, r.name)));
  for (const r of held) if (presence.get(r.namespace, r.name)?.gatewayId !== gatewayId) pending.delete(sandboxKey(r.namespace, r.name));
  if (pending.size === 0) return Promise.resolve();
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      off();
      resolve();
    };
    const timer = setTimeout(done, ms);
    const off = presence.onChange((ns, name, record) => {
      if (record !== undefined && record.gatewayId !== gatewayId) pending.delete(sandboxKey(ns, name));
      if (pending.size === 0) done();
    });
  });
}

function presenceOf(r: PresenceRecord | undefined) {
  return r === undefined ? undefined : { gatewayId: r.gatewayId, sessionId: r.sessionId, instanceId: r.instanceId, epoch: r.epoch, since: r.since };
}

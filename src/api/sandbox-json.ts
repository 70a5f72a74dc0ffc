import type { ActivityReadout } from '../domain/sandbox.js';
import type { ViewEntry } from '../view/sandbox-view.js';

const iso = (ms: number): string => new Date(ms).toISOString();

/**
 * Traffic activity and idle pause (docs/lifecycle.md): `lastActivity` (overall and per port; null before
 * any traffic) and `idle` (the timeout that applies, since when the sandbox has been idle while Ready, and
 * the idle controller's last decision with its reason).
 */
function lifecycleJson(e: ViewEntry, activity: ActivityReadout): Record<string, unknown> {
  const a = activity.get(e.key);
  const ports: Record<string, string> = {};
  if (a !== undefined) for (const [port, at] of a.ports) ports[String(port)] = iso(at);
  const since = activity.idleSince(e.key);
  const note = activity.noteOf(e.key);
  return {
    lastActivity: a === undefined ? null : { at: iso(a.last), ports },
    idle: {
      timeoutMs: e.snapshot.idleTimeoutMs ?? activity.defaultIdleTimeoutMs,
      since: since === undefined ? null : iso(since),
      decision: note === undefined ? null : { decision: note.decision, reason: note.reason, at: iso(note.at) },
    },
  };
}

/** The public JSON shape of one sandbox (the status API and the watch stream). */
export function sandboxJson(e: ViewEntry, activity: ActivityReadout): Record<string, unknown> {
  const s = e.snapshot;
  const p = e.presence;
  return {
    namespace: e.namespace,
    name: e.name,
    ids: s.ids,
    phase: e.status.phase,
    reason: e.status.reason,
    message: e.status.message,
    rule: e.status.rule,
    conditions: e.status.conditions,
    endpoint: s.endpoint,
    ports: s.ports ?? null,
    publicPorts: s.publicPorts ?? null,
    h2cPorts: s.h2cPorts ?? null,
    sessionModel: s.sessionModel,
    session: p === undefined ? null : { gatewayId: p.gatewayId, sessionId: p.sessionId, instanceId: p.instanceId, epoch: p.epoch, since: new Date(p.since).toISOString() },
    uid: s.uid,
    resourceVersion: s.resourceVersion,
    instanceId: s.instanceId,
    driver: e.driver,
    ...lifecycleJson(e, activity),
  };
}

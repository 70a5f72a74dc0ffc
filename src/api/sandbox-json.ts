import type { ViewEntry } from '../view/sandbox-view.js';

/** The public JSON shape of one sandbox (the status API and the watch stream). */
export function sandboxJson(e: ViewEntry): Record<string, unknown> {
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
    sessionModel: s.sessionModel,
    session: p === undefined ? null : { gatewayId: p.gatewayId, sessionId: p.sessionId, instanceId: p.instanceId, epoch: p.epoch, since: new Date(p.since).toISOString() },
    uid: s.uid,
    resourceVersion: s.resourceVersion,
    instanceId: s.instanceId,
    driver: e.driver,
  };
}

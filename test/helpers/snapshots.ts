import type { BackendSnapshot, Condition, Presence } from '../../src/domain/sandbox.js';

/** A ready, supervisor-required sandbox at 10.0.0.1; override what a test needs. */
export function snapshot(over: Partial<BackendSnapshot> = {}): BackendSnapshot {
  return {
    namespace: 'team-a',
    name: 'web',
    uid: 'uid-1',
    resourceVersion: '1',
    instanceId: 'inst-1',
    ids: [],
    state: 'ready',
    conditions: [cond('Ready', 'True', 'DependenciesReady')],
    endpoint: { kind: 'address', addresses: ['10.0.0.1'] },
    sessionModel: 'required',
    ...over,
  };
}

export function cond(type: string, status: Condition['status'], reason = '', message = ''): Condition {
  return { type, status, reason, message };
}

export function presence(over: Partial<Presence> = {}): Presence {
  return { gatewayId: 'gw-a', sessionId: 's-1', instanceId: 'inst-1', epoch: 1, since: 0, ...over };
}

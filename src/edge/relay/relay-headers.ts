import type { Allow } from '../../domain/decide.js';
import { isDnsLabel } from '../../domain/labels.js';
import type { RelayCredentials } from './relay-credential.js';
import { sandboxKey } from '../../domain/sandbox.js';

/**
 * The two headers that carry a relay request to a gateway's relay listener (docs/relay.md): a
 * short-lived credential bound to the target (relay-credential.ts — never the relay secret itself), and
 * the target, which must travel explicitly because the routing headers were removed after the decision.
 * Any front door whose decision is a relay sets both (OVERWRITE at the Envoy doors); the relay listener
 * checks and strips both, and every door strips client copies of every `x-sandgate-*` header.
 */

export const RELAY_AUTH_HEADER = 'x-sandgate-relay-auth';
export const RELAY_TARGET_HEADER = 'x-sandgate-relay-target';

export interface RelayTarget {
  readonly namespace: string;
  readonly name: string;
  readonly port: number;
}

/** `<namespace>/<name>:<port>`. */
export function formatRelayTarget(t: RelayTarget): string {
  return `${sandboxKey(t.namespace, t.name)}:${t.port}`;
}

/** Parses `<namespace>/<name>:<port>` strictly (DNS-1123 labels, port 1–65535 in plain digits). */
export function parseRelayTarget(value: string | undefined): RelayTarget | undefined {
  if (value === undefined) return undefined;
  const m = /^([^/]+)\/([^:]+):([0-9]{1,5})$/.exec(value);
  if (m === null) return undefined;
  const [, namespace, name, digits] = m;
  const port = Number(digits);
  if (!isDnsLabel(namespace!) || !isDnsLabel(name!) || port < 1 || port > 65535 || digits!.startsWith('0')) return undefined;
  return { namespace: namespace!, name: name!, port };
}

/** The relay target of an allow decision. */
export function relayTargetOf(d: Allow): RelayTarget {
  return { namespace: d.entry.namespace, name: d.entry.name, port: d.target.port };
}

/** What a direct (non-relay) decision adds: nothing, without an allocation per request. */
const NO_RELAY_HEADERS: readonly (readonly [string, string])[] = Object.freeze([]);

/**
 * The headers a front door adds to a relay decision so the relay listener at `d.upstream` accepts and
 * routes the request — a fresh credential for this target — and none for a decision that is not a relay.
 */
export function relayHeaders(d: Allow, credentials: RelayCredentials): readonly (readonly [string, string])[] {
  if (!d.relay) return NO_RELAY_HEADERS;
  const target = formatRelayTarget(relayTargetOf(d));
  return [
    [RELAY_AUTH_HEADER, credentials.mint(target)],
    [RELAY_TARGET_HEADER, target],
  ];
}

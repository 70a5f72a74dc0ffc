import { createHash, timingSafeEqual } from 'node:crypto';
import type { Allow } from '../../domain/decide.js';
import { isDnsLabel } from '../../domain/labels.js';

/**
 * The two headers that carry a relay request to a gateway's relay listener (docs/relay.md): the shared
 * secret that proves the sender is Envoy or a peer gateway, and the target, which must travel
 * explicitly because the routing headers were removed after the decision. Any front door whose decision
 * is a relay sets both (OVERWRITE at the Envoy doors); the relay listener checks and strips both, and
 * the Envoy configs strip client copies before anything reads them.
 */

export const RELAY_AUTH_HEADER = 'x-sandgate-relay-auth';
export const RELAY_TARGET_HEADER = 'x-sandgate-relay-target';
/** Every request header with this prefix is the gateways' own: the relay listener never passes one on. */
export const GATEWAY_HEADER_PREFIX = 'x-sandgate-';

export interface RelayTarget {
  readonly namespace: string;
  readonly name: string;
  readonly port: number;
}

/** `<namespace>/<name>:<port>`. */
export function formatRelayTarget(t: RelayTarget): string {
  return `${t.namespace}/${t.name}:${t.port}`;
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

/**
 * The headers a front door adds to a relay decision so the relay listener at `d.upstream` accepts and
 * routes the request; none for a decision that is not a relay.
 */
/** What a direct (non-relay) decision adds: nothing, without an allocation per request. */
const NO_RELAY_HEADERS: readonly (readonly [string, string])[] = Object.freeze([]);

export function relayHeaders(d: Allow, secret: string): readonly (readonly [string, string])[] {
  if (!d.relay) return NO_RELAY_HEADERS;
  return [
    [RELAY_AUTH_HEADER, secret],
    [RELAY_TARGET_HEADER, formatRelayTarget(relayTargetOf(d))],
  ];
}

function digest(s: string): Buffer {
  return createHash('sha256').update(s).digest();
}

/** Constant-time check of a presented secret (digests first, so lengths leak nothing either). */
export function relaySecretMatches(secret: string, presented: string | string[] | undefined): boolean {
  if (typeof presented !== 'string' || secret === '') return false;
  return timingSafeEqual(digest(secret), digest(presented));
}

import { describe, expect, it } from 'vitest';
import { forwardFailure, type ForwardHop } from '../../src/edge/forwarding/failure-codes.js';
import { RelayError } from '../../src/sessions/relay-stream.js';

const sys = (code: string): Error => Object.assign(new Error(code), { code });

describe('forwardFailure: one mapping of forwarding failures to client codes, for every path', () => {
  it.each([
    ['sandbox', sys('ECONNREFUSED'), 'port_not_open'],
    ['sandbox', sys('UND_ERR_CONNECT_TIMEOUT'), 'upstream_timeout'],
    ['sandbox', sys('UND_ERR_HEADERS_TIMEOUT'), 'upstream_timeout'],
    ['sandbox', sys('ETIMEDOUT'), 'upstream_timeout'],
    ['sandbox', sys('ECONNRESET'), 'upstream_error'],
    ['peer_gateway', sys('ECONNREFUSED'), 'sandbox_unreachable'],
    ['peer_gateway', sys('EHOSTUNREACH'), 'sandbox_unreachable'],
    ['peer_gateway', sys('UND_ERR_CONNECT_TIMEOUT'), 'sandbox_unreachable'],
    ['peer_gateway', sys('UND_ERR_HEADERS_TIMEOUT'), 'upstream_timeout'],
    ['peer_gateway', sys('EPIPE'), 'upstream_error'],
    ['relay_stream', new RelayError('busy', 'x'), 'relay_busy'],
    ['relay_stream', new RelayError('refused', 'x'), 'port_not_open'],
    ['relay_stream', new RelayError('timeout', 'x'), 'upstream_timeout'],
    ['relay_stream', new RelayError('not_allowed', 'x'), 'port_not_allowed'],
    ['relay_stream', new RelayError('no_session', 'x'), 'sandbox_unreachable'],
    ['relay_stream', sys('ETIMEDOUT'), 'upstream_timeout'],
    ['relay_stream', sys('ECONNRESET'), 'upstream_error'],
    // Hostile or odd throwables never escape as anything but a typed code.
    ['sandbox', undefined, 'upstream_error'],
    ['peer_gateway', 'a string', 'upstream_error'],
    ['relay_stream', { code: 42 }, 'upstream_error'],
  ] as [ForwardHop, unknown, string][])('%s: %s → %s', (hop, err, code) => {
    expect(forwardFailure(hop, err)).toBe(code);
  });
});

import { describe } from 'vitest';
import { e2bCases } from './cases.js';

// The E2B SDK through the embedded proxy and the relay: the sandbox has no inbound network, its supervisor carries the traffic.
describe('E2B SDK through the relay (a relay-only sandbox reached over its supervisor session)', () => e2bCases('relay'));

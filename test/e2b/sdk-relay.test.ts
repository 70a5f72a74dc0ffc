import { afterAll, beforeAll, describe } from 'vitest';
import { startE2bWorld, type E2bWorld } from './harness.js';
import { e2bCases } from './cases.js';

// The E2B SDK through the embedded proxy and the relay: the sandbox has no inbound network, its supervisor carries the traffic.
describe('E2B SDK through the relay (a relay-only sandbox reached over its supervisor session)', () => {
  const world: { w?: E2bWorld } = {};
  beforeAll(async () => {
    world.w = await startE2bWorld('relay');
  });
  afterAll(async () => {
    await world.w?.close();
  });
  e2bCases(() => world.w!);
});

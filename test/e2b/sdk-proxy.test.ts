import { afterAll, beforeAll, describe } from 'vitest';
import { startE2bWorld, type E2bWorld } from './harness.js';
import { e2bCases } from './cases.js';

// The E2B SDK through sandgate's embedded proxy, straight to the sandbox's address.
describe('E2B SDK through the embedded proxy', () => {
  const world: { w?: E2bWorld } = {};
  beforeAll(async () => {
    world.w = await startE2bWorld('proxy');
  });
  afterAll(async () => {
    await world.w?.close();
  });
  e2bCases(() => world.w!);
});

import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'forks',
    // vitest's default is one worker less than the cores: on a 2-core machine one, every file in turn.
    // Test files wait on servers, Redis failovers and timers far more than they compute, and each starts
    // its own on free ports, so at least two run side by side.
    maxWorkers: Math.max(2, availableParallelism() - 1),
  },
});

import { availableParallelism } from 'node:os';
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'forks',
    // vitest's default is one worker less than the cores: on a 2-core machine one, every file in turn
    // (298 s, the 60 s E2B long-command test alone on the critical path). Test files wait on servers,
    // Redis failovers and timers far more than they compute, and each starts its own on free ports, so two
    // run side by side: 170-178 s on that machine in three whole runs.
    maxWorkers: Math.max(2, availableParallelism() - 1),
  },
});

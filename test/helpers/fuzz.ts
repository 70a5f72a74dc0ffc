import { prng } from './prng.js';

/**
 * The generators of the differential tests (test/differential/) run a fixed, seeded number of cases in
 * `npm test`, and many more from a fresh seed under `npm run fuzz`, which sets SANDGATE_FUZZ_RUNS (cases
 * per test) and may set SANDGATE_FUZZ_SEED to replay a failure. A failing case names its seed.
 */
export interface FuzzPlan {
  readonly seed: number;
  readonly runs: number;
  readonly random: () => number;
}

export function fuzzPlan(defaultRuns: number, defaultSeed: number): FuzzPlan {
  const runs = Number(process.env.SANDGATE_FUZZ_RUNS ?? '');
  const seedText = process.env.SANDGATE_FUZZ_SEED;
  const fuzzing = Number.isInteger(runs) && runs > 0;
  const seed = seedText !== undefined && seedText !== '' ? Number(seedText) >>> 0 : fuzzing ? (Date.now() ^ process.pid) >>> 0 : defaultSeed;
  return { seed, runs: fuzzing ? runs : defaultRuns, random: prng(seed) };
}

/**
 * Memory as the heap figures are computed from it: after two full GCs (the second collects what the
 * first only made unreachable, e.g. objects kept alive by weak callbacks and finalizers). Needs
 * `node --expose-gc`; without it a figure would include garbage, so the probe fails instead.
 */

const gc = (globalThis as { gc?: () => void }).gc;

export function memoryAfterGc(): NodeJS.MemoryUsage {
  if (gc === undefined) throw new Error('heap figures need node --expose-gc');
  gc();
  gc();
  return process.memoryUsage();
}

/** Heap used after two full GCs. */
export function heapAfterGc(): number {
  return memoryAfterGc().heapUsed;
}

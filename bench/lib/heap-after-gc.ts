/** Without `--expose-gc` a figure would include garbage, so the probe fails instead. */

const gc = (globalThis as { gc?: () => void }).gc;

export function memoryAfterGc(): NodeJS.MemoryUsage {
  if (gc === undefined) throw new Error('heap figures need node --expose-gc');
  // The second collects what the first only made unreachable (objects kept by weak callbacks and finalizers).
  gc();
  gc();
  return process.memoryUsage();
}

export function heapAfterGc(): number {
  return memoryAfterGc().heapUsed;
}

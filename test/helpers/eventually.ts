/**
 * Waiting in tests: on an event when there is one to wait for, else on a condition re-checked after each
 * turn of the event loop (never a fixed sleep, never an assertion on time). The timeout only turns a hang
 * into a failure that says what was awaited.
 */

/**
 * Re-checks `check` (sync or async) until it returns a value other than undefined/false, or fails after
 * `timeoutMs`. An error `check` throws (a failed expect) fails at once. `what` may be a function, to say in
 * the failure what was last seen.
 */
export async function eventually<T>(check: () => T | undefined | false | Promise<T | undefined | false>, timeoutMs = 5000, what: string | (() => string) = 'condition'): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await check();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${typeof what === 'string' ? what : what()}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Resolves with the arguments of the next `event` on `emitter`. */
export function nextEvent(emitter: { once(event: string, fn: (...args: unknown[]) => void): unknown }, event: string): Promise<unknown[]> {
  return new Promise((resolve) => emitter.once(event, (...args: unknown[]) => resolve(args)));
}

/**
 * Concurrent requests and WebSockets per sandbox through the embedded proxy. A slot is taken when a
 * request is allowed and given back when its response (or tunnel) closes, however it ends.
 */
export class ConnectionLimit {
  private readonly counts = new Map<string, number>();

  /** `max` 0 means no cap. */
  constructor(private readonly max: number) {}

  /** False without a cap: acquire() always succeeds and release() does nothing, so callers may skip both. */
  get limited(): boolean {
    return this.max > 0;
  }

  /** Takes a slot for `key`; false when the sandbox is at its cap. */
  acquire(key: string): boolean {
    if (this.max === 0) return true;
    const n = this.counts.get(key) ?? 0;
    if (n >= this.max) return false;
    this.counts.set(key, n + 1);
    return true;
  }

  release(key: string): void {
    if (this.max === 0) return;
    const n = (this.counts.get(key) ?? 1) - 1;
    if (n <= 0) this.counts.delete(key);
    else this.counts.set(key, n);
  }

  /** Slots in use for `key` (tests and metrics). */
  inUse(key: string): number {
    return this.counts.get(key) ?? 0;
  }
}

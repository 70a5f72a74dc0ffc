/**
 * A namespace's share of a resource the gateway bounds in total (readiness-wait slots, relay streams):
 * what one tenant may hold at once, so that its flood leaves every other tenant theirs. A configured
 * value of -1 is the default share, a quarter of the total (at least 1).
 */
export function namespaceShare(configured: number, total: number): number {
  return configured < 0 ? Math.max(1, Math.ceil(total / 4)) : configured;
}

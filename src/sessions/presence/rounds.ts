/**
 * Background work done in rounds, never two at a time: `periodMs` after the last round ended, or at once
 * when kicked (once more right after the running round, when one is running). The Redis presence store runs
 * two of these, the lease renewals and the rest of its work, so neither waits for the other.
 */
export class Rounds {
  private running: Promise<void> | undefined;
  private again = false;
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(
    private readonly round: () => Promise<void>,
    private readonly periodMs: number,
  ) {}

  /** Runs a round now (or once more right after the running one); resolves when that round has ended. */
  kick(): Promise<void> {
    if (this.stopped) return Promise.resolve();
    if (this.running !== undefined) {
      this.again = true;
      return this.running;
    }
    clearTimeout(this.timer);
    this.running = (async () => {
      do {
        this.again = false;
        await this.round();
      } while (this.again && !this.stopped);
    })().finally(() => {
      this.running = undefined;
      if (this.stopped) return;
      this.timer = setTimeout(() => void this.kick(), this.periodMs);
      this.timer.unref();
    });
    return this.running;
  }

  /** Schedules no more rounds; resolves once the running one (if any) has ended. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    await Promise.allSettled([this.running]);
  }
}

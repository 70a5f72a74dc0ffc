import type { BackendSnapshot, DriverEvent } from '../../src/domain/sandbox.js';
import type { DriverSink } from '../../src/drivers/driver.js';
import { SandboxView } from '../../src/view/sandbox-view.js';

/** A driver sink that feeds a real view and records every call; until() waits for a condition, never sleeps. */
export class ViewSink implements DriverSink {
  readonly errors: Error[] = [];
  readonly events: DriverEvent[] = [];
  readonly replaces: (readonly BackendSnapshot[])[] = [];
  private readonly checks = new Set<() => void>();

  constructor(
    readonly driverId: string,
    readonly view: SandboxView = new SandboxView({ now: () => 0 }),
  ) {
    view.registerDriver(driverId);
  }

  replace(snapshots: readonly BackendSnapshot[]): void {
    this.replaces.push(snapshots);
    this.view.replace(this.driverId, snapshots);
    this.changed();
  }

  apply(event: DriverEvent): void {
    this.events.push(event);
    this.view.apply(this.driverId, event);
    this.changed();
  }

  error(err: Error): void {
    this.errors.push(err);
    this.changed();
  }

  until(ok: () => boolean, what: string): Promise<void> {
    if (ok()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const guard = setTimeout(() => {
        this.checks.delete(check);
        reject(new Error(`timed out waiting for ${what}`));
      }, 5_000);
      const check = (): void => {
        if (!ok()) return;
        clearTimeout(guard);
        this.checks.delete(check);
        resolve();
      };
      this.checks.add(check);
    });
  }

  private changed(): void {
    for (const c of [...this.checks]) c();
  }
}

import type { ActivityReport, BackendSnapshot } from '../../src/domain/sandbox.js';
import type { Driver, DriverSink } from '../../src/drivers/driver.js';

/** A driver a test feeds by hand. `sync` is called at start unless `startUnsynced`. */
export class TestDriver implements Driver {
  sink: DriverSink | undefined;
  resumed: string[] = [];

  constructor(
    private initial: BackendSnapshot[] = [],
    readonly id = 'test',
    private readonly startUnsynced = false,
  ) {}

  async start(sink: DriverSink): Promise<void> {
    this.sink = sink;
    if (!this.startUnsynced) sink.replace(this.initial);
  }

  async stop(): Promise<void> {}

  sync(list: BackendSnapshot[]): void {
    this.initial = list;
    this.sink!.replace(list);
  }

  upsert(s: BackendSnapshot): void {
    this.sink!.apply({ type: 'upsert', snapshot: s });
  }

  /** What resume() does after recording the call (tests set it: succeed later, or fail). */
  onResume: (namespace: string, name: string) => Promise<void> = async () => undefined;

  async resume(namespace: string, name: string): Promise<void> {
    this.resumed.push(`${namespace}/${name}`);
    return this.onResume(namespace, name);
  }

  paused: string[] = [];
  /** What pause() does after recording the call. */
  onPause: (namespace: string, name: string) => Promise<void> = async () => undefined;

  async pause(namespace: string, name: string): Promise<void> {
    this.paused.push(`${namespace}/${name}`);
    return this.onPause(namespace, name);
  }

  reports: ActivityReport[][] = [];

  async reportActivity(reports: readonly ActivityReport[]): Promise<void> {
    this.reports.push([...reports]);
  }
}

import type { ActivityReport } from '../domain/sandbox.js';
import type { Logger } from 'pino';
import type { ActivityLog } from './activity-log.js';
import type { LifecycleChannel } from './lifecycle-channel.js';
import type { SandboxView } from '../view/sandbox-view.js';

/**
 * Activity off the request path (docs/lifecycle.md): every `--activity-report-interval-ms` this gateway
 * publishes what its doors saw since the last round to its peers (one message, never a command per
 * request) and merges theirs into its own view. The lifecycle writer (one gateway of the cluster, see
 * lifecycle-channel.ts) then reports to the drivers the sandboxes whose activity moved and whose last
 * report is at least `--activity-patch-interval-ms` old: one batched call per driver and round.
 */

/** A driver's report call, by driver id; undefined when the driver takes no reports. */
export type ReportFn = (driverId: string) => ((reports: readonly ActivityReport[]) => Promise<void>) | undefined;

export interface ActivityReporterOptions {
  readonly view: SandboxView;
  readonly activity: ActivityLog;
  readonly channel: LifecycleChannel;
  readonly report: ReportFn;
  readonly reportIntervalMs: number;
  readonly patchIntervalMs: number;
  readonly now: () => number;
  readonly log: Logger;
}

export class ActivityReporter {
  /** Per sandbox: the activity time last reported to its driver, and when. */
  private readonly reported = new Map<string, { at: number; when: number }>();
  /** Drivers with a report call in flight (a slow driver is not sent overlapping batches). */
  private readonly busy = new Set<string>();
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly o: ActivityReporterOptions) {
    const activity = o.activity;
    o.channel.onActivity((records) => {
      for (const r of records) {
        // Only sandboxes this gateway knows: a peer's report of one not (yet) here is dropped. A time past
        // this gateway's clock (a peer whose clock runs ahead) counts as now, so it cannot hold a sandbox
        // awake longer than its real activity.
        const e = o.view.get(r.namespace, r.name);
        if (e !== undefined) activity.merge(e.key, r.port, Math.min(r.at, o.now()));
      }
    });
    o.view.onChange((key, entry) => {
      if (entry === undefined) this.reported.delete(key);
    });
  }

  start(): void {
    this.timer = setInterval(() => void this.round(), this.o.reportIntervalMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
    // What the doors saw since the last round still reaches the peers.
    this.o.channel.publish(this.o.activity.drainLocal());
  }

  /** One round: publish, then (as the writer) report what is due. Resolves when its reports have settled. */
  round(): Promise<void> {
    this.o.channel.publish(this.o.activity.drainLocal());
    return this.o.channel.isWriter() ? this.reportDue() : Promise.resolve();
  }

  private async reportDue(): Promise<void> {
    const now = this.o.now();
    const byDriver = new Map<string, ActivityReport[]>();
    for (const [key, a] of this.o.activity.entries()) {
      const r = this.reported.get(key);
      if (r !== undefined && (a.last <= r.at || now - r.when < this.o.patchIntervalMs)) continue;
      const slash = key.indexOf('/');
      const e = this.o.view.get(key.slice(0, slash), key.slice(slash + 1));
      if (e === undefined || this.busy.has(e.driver)) continue;
      let list = byDriver.get(e.driver);
      if (list === undefined) byDriver.set(e.driver, (list = []));
      list.push({ namespace: e.namespace, name: e.name, at: a.last, ports: new Map(a.ports) });
    }
    const sent: Promise<void>[] = [];
    for (const [driver, reports] of byDriver) {
      const send = this.o.report(driver);
      if (send === undefined) continue;
      for (const r of reports) this.reported.set(r.namespace + '/' + r.name, { at: r.at, when: now });
      this.busy.add(driver);
      const report = send(reports)
        .catch((err: unknown) => {
          this.o.log.warn({ err, driver, sandboxes: reports.length }, 'activity report failed; retried next round');
          for (const r of reports) this.reported.delete(r.namespace + '/' + r.name);
        })
        .finally(() => this.busy.delete(driver));
      sent.push(report);
    }
    await Promise.all(sent);
  }
}

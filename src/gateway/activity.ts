import type { Config } from '../config/schema.js';
import type { Driver } from '../drivers/driver.js';
import type { ActivityDemand } from '../lifecycle/activity-recorder.js';
import { ActivityReporter } from '../lifecycle/activity-reporter.js';
import { IdleController } from '../lifecycle/idle-controller.js';
import { LocalLifecycleChannel, RedisLifecycleChannel, type LifecycleChannel } from '../lifecycle/lifecycle-channel.js';
import type { Lifecycle } from '../lib/lifecycle.js';
import { redisTarget } from '../lib/redis-connection.js';
import type { Logger } from '../observability/logger.js';
import type { Core } from './core.js';

/**
 * Activity and idle pause: the doors' activity shared between gateways and reported to drivers, and the
 * idle controller that pauses sandboxes nobody uses. Off the request path, once the drivers run.
 */

type ActivitySlice = Pick<Config, 'presence' | 'presenceRedisOptions' | 'presenceKeyPrefix' | 'leaseTtlMs' | 'activityReportIntervalMs' | 'activityPatchIntervalMs' | 'activityReports'>;

/** What the lifecycle rounds read and drive: the view, its activity, the drivers, the pause counter. */
type ActivityParts = Pick<Core, 'view' | 'activityLog' | 'activityDemand' | 'metrics' | 'now' | 'drivers' | 'resumer'>;

/** Activity reports and idle pause (their rounds run on timers; tests also run them by hand). */
export interface ActivityRounds {
  readonly reporter: ActivityReporter;
  readonly idle: IdleController;
  readonly channel: LifecycleChannel;
}

/**
 * Made with the core, before any driver starts: the idle controller follows the view's changes from the
 * first list on (a sandbox Ready from the start is idle from then).
 */
export function createActivity(config: ActivitySlice, parts: ActivityParts, gatewayId: string, log: Logger): ActivityRounds {
  const { view, activityLog: activity, activityDemand: demand, metrics, now } = parts;
  const lifecycleLog = log.child({ part: 'lifecycle' });
  const channel = lifecycleChannel(config, gatewayId, lifecycleLog, demand);
  // With Redis, the namespace quota counts every gateway's resumes in flight (resume-claims.ts).
  if (channel.resumeClaims !== undefined) parts.resumer.shareClaims(channel.resumeClaims);
  const driverById = (id: string): Driver | undefined => parts.drivers.find((d) => d.id === id);
  const reporter = new ActivityReporter({
    view,
    activity,
    channel,
    report: (id) => {
      const d = config.activityReports ? driverById(id) : undefined;
      return d?.reportActivity === undefined ? undefined : (reports) => d.reportActivity?.(reports) ?? Promise.resolve();
    },
    reportIntervalMs: config.activityReportIntervalMs,
    patchIntervalMs: config.activityPatchIntervalMs,
    now,
    log: lifecycleLog,
  });
  const idle = new IdleController({
    view,
    activity,
    channel,
    pause: (id) => {
      const d = driverById(id);
      return d?.pause === undefined ? undefined : (ns, name) => d.pause?.(ns, name) ?? Promise.resolve();
    },
    defaultTimeoutMs: activity.defaultIdleTimeoutMs,
    graceMs: config.presence === 'memory' ? 0 : config.activityReportIntervalMs,
    checkMs: Math.min(1000, config.activityReportIntervalMs),
    now,
    log: lifecycleLog,
    counted: metrics.watchLifecycle(() => activity.idle(), now),
    demand,
  });
  return { reporter, idle, channel };
}

/** Activity sharing and reports, and idle pause: off the request path, once the drivers run. */
export async function startActivity(life: Lifecycle, { reporter, idle, channel }: ActivityRounds): Promise<void> {
  await life.start(
    'lifecycle',
    async () => {
      await channel.start();
      reporter.start();
      idle.start();
    },
    async () => {
      idle.stop();
      reporter.stop();
      await channel.close();
    },
  );
}

/** Shares activity and the lifecycle writer between gateways: through the presence Redis, or none for one gateway. */
function lifecycleChannel(config: ActivitySlice, gatewayId: string, log: Logger, demand: ActivityDemand): LifecycleChannel {
  if (config.presence === 'memory') return new LocalLifecycleChannel();
  return new RedisLifecycleChannel({
    target: redisTarget(config.presence, config.presenceRedisOptions, 'presence (memory or a Redis URL)'),
    gatewayId,
    keyPrefix: config.presenceKeyPrefix,
    ttlMs: config.leaseTtlMs,
    log,
    writerWork: () => demand.writerWork(),
  });
}

import type { Logger } from 'pino';
import type { ActivityRecord } from '../domain/sandbox.js';
import { createRedisClient, keepConnecting, type RedisClient, type RedisTarget } from '../lib/redis-connection.js';
import { RedisResumeClaims, type ResumeClaims } from './resume-claims.js';

/**
 * What gateways share about traffic-driven lifecycle (docs/lifecycle.md): each gateway's activity,
 * published in batches (one PUBLISH per report interval per gateway, never a command per request), and
 * one lifecycle writer at a time — the gateway that patches activity onto sandbox objects and pauses idle
 * sandboxes, so N gateways never patch or pause the same sandbox twice. With memory presence the one
 * gateway is the writer; with Redis presence the writer holds a lock key (SET NX PX, renewed every third
 * of its TTL by a compare-and-expire script), and a crashed writer's lock lapses within one TTL. With
 * Redis it also carries the resumes in flight every gateway counts against `--max-running-per-namespace`
 * (resume-claims.ts).
 */

export interface LifecycleChannel {
  /** Sends this gateway's activity since its last report to its peers. */
  publish(records: readonly ActivityRecord[]): void;
  /** Called with each batch a peer publishes. */
  onActivity(listener: (records: ActivityRecord[]) => void): void;
  /** True while this gateway is the lifecycle writer. */
  isWriter(): boolean;
  /** Resumes in flight shared between gateways; undefined when this gateway is the only one. */
  readonly resumeClaims?: ResumeClaims | undefined;
  start(): Promise<void>;
  close(): Promise<void>;
}

/** One gateway: nothing to share, and it is the writer. */
export class LocalLifecycleChannel implements LifecycleChannel {
  publish(): void {}
  onActivity(): void {}
  isWriter(): boolean {
    return true;
  }
  async start(): Promise<void> {}
  async close(): Promise<void> {}
}

export interface RedisLifecycleOptions {
  readonly target: RedisTarget;
  readonly gatewayId: string;
  readonly keyPrefix: string;
  /** The writer lock's lifetime (the presence lease TTL). */
  readonly ttlMs: number;
  readonly log: Logger;
  readonly now?: () => number;
  /** Whether the writer has work (activity-recorder.ts's ActivityDemand): without it the lock is neither taken nor renewed. */
  readonly writerWork: () => boolean;
}

/** Renews the lock if this gateway holds it, else takes it if free; returns 1 when held after the call. */
const CLAIM = `
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
if v then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1`;

/** Deletes the lock only if this gateway holds it. */
const RELEASE = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`;

/** Most records one message carries; a larger batch goes out in several. */
const MAX_RECORDS_PER_MESSAGE = 5000;

/** A peer's message: `{g: gatewayId, r: [[namespace, name, port, at], …]}`. Anything else is dropped. */
export function decodeActivity(text: string, self: string): ActivityRecord[] | undefined {
  let m: unknown;
  try {
    m = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof m !== 'object' || m === null) return undefined;
  const { g, r } = m as { g?: unknown; r?: unknown };
  if (typeof g !== 'string' || !Array.isArray(r)) return undefined;
  if (g === self) return [];
  const out: ActivityRecord[] = [];
  for (const x of r) {
    if (!Array.isArray(x) || x.length !== 4) return undefined;
    const [namespace, name, port, at] = x as unknown[];
    if (typeof namespace !== 'string' || typeof name !== 'string' || namespace === '' || name === '') return undefined;
    if (!Number.isInteger(port) || (port as number) < 1 || (port as number) > 65535 || !Number.isSafeInteger(at) || (at as number) < 0) return undefined;
    out.push({ namespace, name, port: port as number, at: at as number });
  }
  return out;
}

export function encodeActivity(gatewayId: string, records: readonly ActivityRecord[]): string {
  return JSON.stringify({ g: gatewayId, r: records.map((x) => [x.namespace, x.name, x.port, x.at]) });
}

export class RedisLifecycleChannel implements LifecycleChannel {
  private readonly main: RedisClient;
  private readonly sub: RedisClient;
  private readonly channel: string;
  private readonly lockKey: string;
  private readonly listeners: ((records: ActivityRecord[]) => void)[] = [];
  private readonly now: () => number;
  /** Local deadline of the held lock (a renewal that fails leaves it to lapse here first). */
  private heldUntil = 0;
  private timer: NodeJS.Timeout | undefined;
  private closed = false;
  private readonly stops: (() => void)[] = [];
  readonly resumeClaims: ResumeClaims;

  constructor(private readonly opts: RedisLifecycleOptions) {
    this.now = opts.now ?? Date.now;
    const commandTimeoutMs = Math.min(2000, Math.max(250, Math.floor(opts.ttlMs / 2)));
    this.main = createRedisClient(opts.target, { name: `sandgate-lifecycle:${opts.gatewayId}`, commandTimeoutMs });
    this.sub = createRedisClient(opts.target, { name: `sandgate-lifecycle-sub:${opts.gatewayId}`, commandTimeoutMs });
    // The presence keys' hash tag, so on Redis Cluster the lock sits beside shard 0.
    this.channel = `{${opts.keyPrefix}}:activity`;
    this.lockKey = `{${opts.keyPrefix}}:lifecycle-writer`;
    this.resumeClaims = new RedisResumeClaims(this.main, opts.keyPrefix);
  }

  async start(): Promise<void> {
    const log = this.opts.log;
    for (const c of [this.main, this.sub]) {
      c.on('error', (err: Error) => log.debug({ err: errorText(err) }, 'lifecycle channel redis error'));
      this.stops.push(keepConnecting(c, () => !this.closed));
    }
    this.sub.on('ready', () => void this.sub.subscribe(this.channel).catch((err: unknown) => log.warn({ err: errorText(err) }, 'activity subscription failed')));
    this.sub.on('message', (channel: string, text: string) => {
      if (channel !== this.channel) return;
      const records = decodeActivity(text, this.opts.gatewayId);
      if (records === undefined) return void log.warn({ bytes: text.length }, 'dropped a malformed activity message');
      if (records.length > 0) for (const l of this.listeners) l(records);
    });
    // Like presence: a slow or failed first connect is not fatal (ioredis keeps trying); until then this
    // gateway is not the writer and its reports are dropped.
    await Promise.race([Promise.allSettled([this.main.connect(), this.sub.connect()]), new Promise((r) => setTimeout(r, Math.min(this.opts.ttlMs, 2000)).unref())]);
    await this.claim();
    this.timer = setInterval(() => void this.claim(), Math.max(10, Math.floor(this.opts.ttlMs / 3)));
    this.timer.unref();
  }

  publish(records: readonly ActivityRecord[]): void {
    if (records.length === 0 || this.main.status !== 'ready') return;
    for (let i = 0; i < records.length; i += MAX_RECORDS_PER_MESSAGE) {
      this.main.publish(this.channel, encodeActivity(this.opts.gatewayId, records.slice(i, i + MAX_RECORDS_PER_MESSAGE))).catch((err: unknown) => this.opts.log.debug({ err: errorText(err) }, 'activity publish failed'));
    }
  }

  onActivity(listener: (records: ActivityRecord[]) => void): void {
    this.listeners.push(listener);
  }

  isWriter(): boolean {
    return this.now() < this.heldUntil;
  }

  private async claim(): Promise<void> {
    if (this.closed || this.main.status !== 'ready') return;
    if (!this.opts.writerWork()) return this.release();
    const asked = this.now();
    try {
      const held = (await this.main.eval(CLAIM, 1, this.lockKey, this.opts.gatewayId, String(this.opts.ttlMs))) === 1;
      const was = this.isWriter();
      // Counted from before the call: the lock may have been set up to a round trip earlier than its reply.
      this.heldUntil = held ? asked + this.opts.ttlMs : 0;
      if (held !== was) this.opts.log.info({ writer: held }, held ? 'this gateway is the lifecycle writer' : 'this gateway is no longer the lifecycle writer');
    } catch (err) {
      this.opts.log.debug({ err: errorText(err) }, 'lifecycle writer lock renewal failed');
    }
  }

  /** Gives the lock up when this gateway holds it. */
  private async release(): Promise<void> {
    if (!this.isWriter()) return;
    this.heldUntil = 0;
    await this.main.eval(RELEASE, 1, this.lockKey, this.opts.gatewayId).catch(() => undefined);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.timer);
    for (const s of this.stops) s();
    await this.release();
    this.main.disconnect();
    this.sub.disconnect();
  }
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

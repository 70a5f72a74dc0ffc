import type { Logger } from 'pino';
import type { PresenceStore } from './presence/presence-store.js';
import type { LocalSession } from './supervisor-server.js';
import type { Move } from './supervisor-protocol.js';

/**
 * Rebalancing supervisor sessions across gateways (docs/presence.md, "Rebalancing and drain"). Sessions
 * stay where supervisors put them, so a gateway that joins a fleet gets none until sessions reconnect for
 * another reason. Each gateway therefore looks, every round, at how many sessions each live gateway holds
 * (its own, and the records of every peer its presence mirror shows), and when it holds more than its share
 * by a margin, asks some of its supervisors to move to the lightest gateways (`move`, which supervisors
 * follow make-before-break: the sandbox keeps a session throughout, and the epoch fence closes the old).
 *
 * Bounded so that nothing flaps: only a gateway above its share plus the margin moves anyone, and only its
 * excess over its share; a light gateway never moves sessions; at most `maxMoves` per round; and no new
 * round starts while sessions asked to move are still here (up to `moveTimeoutMs`, after which the move is
 * taken as failed and the session may be asked again).
 */

/** What one gateway holds, as this gateway sees it. */
export interface GatewayLoad {
  readonly gatewayId: string;
  readonly sessions: number;
  /** The supervisor URL it published (`--supervisor-public-url`), if any. */
  readonly url?: string | undefined;
}

/** Moves this gateway asks for: `count` sessions to `to`. */
export interface PlannedMove {
  readonly to: GatewayLoad;
  readonly count: number;
}

/** The margin above its share a gateway may hold before it moves sessions: a tenth of the share, at least 1. */
export function rebalanceMargin(share: number): number {
  return Math.max(1, Math.ceil(share / 10));
}

/**
 * Pure: the moves `self` asks for, given every live gateway's load (self included). A gateway moves only
 * its excess over its share (⌈total / gateways⌉), only when that excess passes the margin, at most
 * `maxMoves`, to the gateways below their share that published a URL, in proportion to how far below they are.
 */
export function planMoves(self: string, loads: readonly GatewayLoad[], maxMoves: number): PlannedMove[] {
  const mine = loads.find((l) => l.gatewayId === self);
  if (mine === undefined || loads.length < 2) return [];
  const total = loads.reduce((sum, l) => sum + l.sessions, 0);
  const share = Math.ceil(total / loads.length);
  if (mine.sessions <= share + rebalanceMargin(share)) return [];
  const floor = Math.floor(total / loads.length);
  // Only a gateway that published its URL is a target: a move naming none may land on any gateway, a heavy
  // one included, which would move it on again (sessions would flap between the heavy gateways).
  const light = loads.filter((l) => l.gatewayId !== self && l.url !== undefined && l.sessions < floor).sort((a, b) => a.sessions - b.sessions || a.gatewayId.localeCompare(b.gatewayId));
  const deficit = light.reduce((sum, l) => sum + (floor - l.sessions), 0);
  let left = Math.min(mine.sessions - share, maxMoves, deficit);
  const budget = left;
  const out: PlannedMove[] = [];
  for (const l of light) {
    if (left <= 0) break;
    const count = Math.min(left, floor - l.sessions, Math.max(1, Math.round((budget * (floor - l.sessions)) / deficit)));
    out.push({ to: l, count });
    left -= count;
  }
  return out;
}

/** What the rebalancer needs of the supervisor endpoint. */
export interface MovableSessions {
  /** Accepted sessions here (claiming ones included: they are skipped). */
  sessions(): Iterable<LocalSession>;
  move(s: LocalSession, gateway: string | undefined, reason: Move['reason']): boolean;
}

export interface RebalancerOptions {
  readonly gatewayId: string;
  /** A round every this many ms. */
  readonly intervalMs: number;
  /** Sessions asked to move per round, at most. */
  readonly maxMoves: number;
  /** A session asked to move that is still here after this is taken as not moved. Default 3 rounds. */
  readonly moveTimeoutMs?: number;
  readonly log: Logger;
  readonly now?: () => number;
}

export class Rebalancer {
  private timer: NodeJS.Timeout | undefined;
  private readonly now: () => number;
  private readonly moveTimeoutMs: number;
  /** Moves asked for and not yet done or timed out, by session id. */
  private readonly asked = new Map<string, number>();
  /** Sessions asked to move so far (for metrics and tests). */
  moves = 0;

  constructor(
    private readonly opts: RebalancerOptions,
    private readonly store: PresenceStore,
    private readonly sessions: MovableSessions,
  ) {
    this.now = opts.now ?? Date.now;
    this.moveTimeoutMs = opts.moveTimeoutMs ?? 3 * opts.intervalMs;
  }

  start(): void {
    this.timer = setInterval(() => this.round(), this.opts.intervalMs);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** Every live gateway's load as this gateway's presence mirror shows it, this gateway's from its own sessions. */
  loads(): GatewayLoad[] {
    const self = this.opts.gatewayId;
    const counts = new Map<string, number>();
    for (const l of this.store.gatewayLeases?.() ?? []) counts.set(l.gatewayId, 0);
    for (const r of this.store.list()) if (r.gatewayId !== self && counts.has(r.gatewayId)) counts.set(r.gatewayId, counts.get(r.gatewayId)! + 1);
    let mine = 0;
    for (const s of this.sessions.sessions()) if (s.state === 'active') mine++;
    counts.set(self, mine);
    return [...counts].map(([gatewayId, sessions]) => ({ gatewayId, sessions, url: gatewayId === self ? undefined : this.store.gatewayInfo?.(gatewayId)?.supervisor }));
  }

  /** One round: asks for the moves planMoves() gives, unless earlier moves are still under way. */
  round(): number {
    const now = this.now();
    const here = new Set<string>();
    for (const s of this.sessions.sessions()) here.add(s.sessionId);
    for (const [id, at] of this.asked) if (!here.has(id) || now - at >= this.moveTimeoutMs) this.asked.delete(id);
    if (this.asked.size > 0) return 0;
    const plan = planMoves(this.opts.gatewayId, this.loads(), this.opts.maxMoves);
    if (plan.length === 0) return 0;
    const candidates = this.movable();
    let n = 0;
    for (const p of plan) {
      for (let k = 0; k < p.count; k++) {
        const s = candidates.next();
        if (s.done === true) break;
        if (!this.sessions.move(s.value, p.to.url, 'rebalance')) continue;
        this.asked.set(s.value.sessionId, now);
        n++;
      }
    }
    this.moves += n;
    if (n > 0) this.opts.log.info({ moves: n, to: plan.map((p) => ({ gateway: p.to.gatewayId, count: p.count })) }, 'asked supervisors to move: rebalancing sessions');
    return n;
  }

  private *movable(): Generator<LocalSession> {
    for (const s of this.sessions.sessions()) if (s.state === 'active' && s.features.has('move') && !this.asked.has(s.sessionId)) yield s;
  }
}

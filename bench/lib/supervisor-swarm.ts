import { readFileSync } from 'node:fs';
import WebSocket from 'ws';
import { CLOSE, SUBPROTOCOL, SUPERVISOR_PATH } from '../../src/sessions/supervisor-protocol.js';
import { mintSupervisorToken, parseSupervisorKeys } from '../../src/sessions/supervisor-token.js';
import { announceReady, exitWithParent, serveIpc } from './ipc.js';
import { sandboxName, sandboxNamespace } from './sandboxes.js';

/**
 * Many supervisors in one process (thousands of SupervisorClient objects would measure the client), each
 * speaking protocol v1 as the reference supervisor does: token, hello, pong to every ping, a ping every
 * heartbeat interval (one shared timer for all), and reconnection the way the reference client does it —
 * within 50 ms after 1012/4409, else full-jitter backoff from 100 ms. A reconnecting supervisor goes to the
 * next gateway in its list, as it would through a load balancer that took the dead one out.
 *
 * Connections come from 16 loopback source addresses, so 10k sessions and a reconnect storm do not run out
 * of ephemeral ports on one source address.
 *
 *   IPC: configure {gateways, secretFile, audience}, open {from, count}, close {}, reconnect {},
 *        waitAccepted {count, sinceMs, timeoutMs}, setGateways {gateways}, status {}
 */

const SOURCES = 16;
const HEARTBEAT_TICK_MS = 500;

interface Session {
  readonly index: number;
  readonly namespace: string;
  readonly name: string;
  readonly token: string;
  url: string;
  ws: WebSocket | undefined;
  accepted: boolean;
  acceptedAt: number;
  attempt: number;
  lastPing: number;
  intervalMs: number;
  timer: NodeJS.Timeout | undefined;
}

let gateways: string[] = [];
let keysText = '';
let audience = '';
const sessions: Session[] = [];
let stopped = false;
let acceptedCount = 0;
let waiters: (() => void)[] = [];
let firstError: string | undefined;

function nextGateway(current: string): string {
  const at = gateways.indexOf(current);
  return gateways[(at + 1) % gateways.length]!;
}

function backoff(attempt: number): number {
  return Math.floor(Math.random() * Math.min(10_000, 100 * 2 ** Math.min(attempt, 20)));
}

function connect(s: Session): void {
  if (stopped) return;
  const ws = new WebSocket(s.url + SUPERVISOR_PATH, SUBPROTOCOL, {
    headers: { authorization: `Bearer ${s.token}` },
    localAddress: `127.0.0.${1 + (s.index % SOURCES)}`,
    perMessageDeflate: false,
    handshakeTimeout: 30_000,
  });
  s.ws = ws;
  ws.on('open', () => ws.send(JSON.stringify({ type: 'hello', namespace: s.namespace, name: s.name, instanceId: `bench-${s.index}`, version: 'sandgate-bench/1' })));
  ws.on('message', (data) => {
    let m: { type?: string; t?: number; heartbeatIntervalMs?: number; sessionId?: string };
    try {
      m = JSON.parse(data.toString()) as typeof m;
    } catch {
      return;
    }
    if (m.type === 'accepted') {
      s.accepted = true;
      s.acceptedAt = Date.now();
      s.attempt = 0;
      s.intervalMs = m.heartbeatIntervalMs ?? 5000;
      s.lastPing = s.acceptedAt;
      acceptedCount++;
      for (const w of waiters) w();
    } else if (m.type === 'ping') {
      ws.send(JSON.stringify({ type: 'pong', t: m.t }));
    } else if (m.type === 'rejected') {
      firstError ??= `rejected: ${JSON.stringify(m)}`;
    }
  });
  ws.on('error', (err) => {
    firstError ??= err.message;
  });
  ws.on('close', (code) => {
    if (s.ws !== ws) return;
    s.ws = undefined;
    if (s.accepted) acceptedCount--;
    s.accepted = false;
    if (stopped) return;
    if (code === CLOSE.superseded) return;
    const delay = code === CLOSE.serviceRestart || code === CLOSE.presenceLost ? Math.floor(Math.random() * 50) : backoff(s.attempt++);
    s.url = nextGateway(s.url);
    s.timer = setTimeout(() => connect(s), delay);
  });
}

/** Our side of the heartbeat: one timer for every session. */
const heartbeat = setInterval(() => {
  const now = Date.now();
  for (const s of sessions) {
    if (s.accepted && s.ws?.readyState === WebSocket.OPEN && now - s.lastPing >= s.intervalMs) {
      s.lastPing = now;
      s.ws.send(JSON.stringify({ type: 'ping', t: now }));
    }
  }
}, HEARTBEAT_TICK_MS);

function waitAccepted(count: number, sinceMs: number, timeoutMs: number): Promise<{ accepted: number; lastAcceptedAt: number; timedOut: boolean; firstError: string | undefined }> {
  const result = (timedOut: boolean) => {
    let accepted = 0;
    let lastAcceptedAt = 0;
    for (const s of sessions) {
      if (s.accepted && s.acceptedAt >= sinceMs) {
        accepted++;
        lastAcceptedAt = Math.max(lastAcceptedAt, s.acceptedAt);
      }
    }
    return { accepted, lastAcceptedAt, timedOut, firstError };
  };
  if (result(false).accepted >= count) return Promise.resolve(result(false));
  return new Promise((resolve) => {
    // Counting on every acceptance would be quadratic; the counter gates the full count.
    const onAccept = (): void => {
      if (acceptedCount >= count && result(false).accepted >= count) finish(false);
    };
    const timer = setTimeout(() => finish(true), timeoutMs);
    const finish = (timedOut: boolean): void => {
      clearTimeout(timer);
      waiters = waiters.filter((w) => w !== onAccept);
      resolve(result(timedOut));
    };
    waiters.push(onAccept);
  });
}

/** Mints the tokens, then opens every session at once; returns when connecting began (epoch ms). */
async function open(from: number, count: number): Promise<{ startedAt: number }> {
  stopped = false;
  const keys = { keys: parseSupervisorKeys(keysText, 'bench secret'), audience };
  for (let i = from; i < from + count; i++) {
    const namespace = sandboxNamespace(i);
    const name = sandboxName(i);
    const token = await mintSupervisorToken(keys, namespace, name, 3600);
    const s: Session = { index: i, namespace, name, token, url: gateways[0]!, ws: undefined, accepted: false, acceptedAt: 0, attempt: 0, lastPing: 0, intervalMs: 5000, timer: undefined };
    sessions.push(s);
  }
  const startedAt = Date.now();
  for (const s of sessions.slice(sessions.length - count)) connect(s);
  return { startedAt };
}

/** Closes every session (1000) and stops reconnecting; resolves when every socket is closed. */
async function closeAll(): Promise<{ closed: number }> {
  stopped = true;
  const closing: Promise<void>[] = [];
  for (const s of sessions) {
    clearTimeout(s.timer);
    const ws = s.ws;
    if (ws === undefined) continue;
    closing.push(new Promise((resolve) => ws.once('close', () => resolve())));
    ws.close(CLOSE.normal, 'bench');
  }
  await Promise.all(closing);
  return { closed: closing.length };
}

/**
 * The storm (after closeAll): every session reconnects within 50 ms, as the reference supervisors of a
 * restarting gateway do after its 1012.
 */
function reconnectAll(): { started: number } {
  stopped = false;
  for (const s of sessions) {
    s.attempt = 0;
    s.timer = setTimeout(() => connect(s), Math.floor(Math.random() * 50));
  }
  return { started: sessions.length };
}

exitWithParent();
serveIpc({
  configure(a: { gateways: string[]; secretFile: string; audience: string }) {
    gateways = a.gateways;
    keysText = readFileSync(a.secretFile, 'utf8');
    audience = a.audience;
    return {};
  },
  setGateways(a: { gateways: string[] }) {
    gateways = a.gateways;
    return {};
  },
  open: (a: { from: number; count: number }) => open(a.from, a.count),
  close: () => closeAll(),
  reconnect: () => reconnectAll(),
  waitAccepted: (a: { count: number; sinceMs: number; timeoutMs: number }) => waitAccepted(a.count, a.sinceMs, a.timeoutMs),
  status: () => ({ sessions: sessions.length, accepted: acceptedCount, firstError }),
});
process.once('SIGTERM', () => {
  clearInterval(heartbeat);
  stopped = true;
  for (const s of sessions) s.ws?.terminate();
  process.exit(0);
});
announceReady({ pid: process.pid });

import type { WebSocket } from 'ws';

/** What a test reads from a WebSocket: its JSON (text) messages in order, and how it closed. Binary frames are left to other listeners. */
export interface WsMessages {
  /** Messages received and not yet taken by next(). */
  readonly messages: any[];
  /** The oldest message not yet taken, waiting for one when none is queued. */
  next(): Promise<any>;
  readonly closed: Promise<{ code: number; reason: string }>;
}

export function wsMessages(ws: WebSocket): WsMessages {
  const messages: any[] = [];
  const waiters: ((m: any) => void)[] = [];
  ws.on('message', (d, binary) => {
    if (binary) return;
    const m = JSON.parse(d.toString());
    const w = waiters.shift();
    if (w) w(m);
    else messages.push(m);
  });
  const closed = new Promise<{ code: number; reason: string }>((resolve) => ws.on('close', (code, reason) => resolve({ code, reason: reason.toString() })));
  return { messages, closed, next: () => (messages.length > 0 ? Promise.resolve(messages.shift()) : new Promise((r) => waiters.push(r))) };
}

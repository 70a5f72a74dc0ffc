import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';

interface IpcRequest {
  readonly id: number;
  readonly op: string;
  readonly args: unknown;
}

export interface IpcReply {
  readonly id: number;
  readonly ok: boolean;
  readonly value?: unknown;
  readonly error?: string;
}

type Handlers = Readonly<Record<string, (args: never) => unknown>>;

function isRequest(m: unknown): m is IpcRequest {
  return typeof m === 'object' && m !== null && typeof (m as IpcRequest).id === 'number' && typeof (m as IpcRequest).op === 'string';
}

const registered = new Map<string, (args: never) => unknown>();
let listening = false;

function reply(r: IpcReply): void {
  if (process.connected) process.send!(r);
}

/**
 * Several modules of one process may serve (the heap probe beside a bench server): their handlers share one
 * listener, so each request gets exactly one answer. With `keepAlive` false the channel never keeps the process
 * alive on its own (the probe inside a gateway, which must exit on SIGTERM as it would without it).
 */
export function serveIpc(handlers: Handlers, keepAlive = true): void {
  if (process.send === undefined) throw new Error('this module runs as a forked child of the bench runner');
  for (const [op, h] of Object.entries(handlers)) registered.set(op, h);
  if (keepAlive) process.channel?.ref();
  else if (!listening) process.channel?.unref();
  if (listening) return;
  listening = true;
  process.on('message', (m: unknown) => {
    if (!isRequest(m)) return;
    const handler = registered.get(m.op) as ((args: unknown) => unknown) | undefined;
    if (handler === undefined) return reply({ id: m.id, ok: false, error: `unknown op ${m.op}` });
    Promise.resolve()
      .then(() => handler(m.args))
      .then(
        (value) => reply({ id: m.id, ok: true, value }),
        (err: unknown) => reply({ id: m.id, ok: false, error: err instanceof Error ? (err.stack ?? err.message) : String(err) }),
      );
  });
  // Adding a 'message' listener refs the channel again.
  if (!keepAlive) process.channel?.unref();
}

export function announceReady(info: Record<string, unknown>): void {
  process.send?.({ ready: info });
}

/** So no child outlives a killed runner. */
export function exitWithParent(): void {
  process.on('disconnect', () => process.exit(0));
}

/** Keep-alive outlasts any client pool, so clients decide when to reconnect. */
export function serveHttpChild(server: Server, port: number): void {
  server.keepAliveTimeout = 65_000;
  server.listen(port, '127.0.0.1', () => announceReady({ port: (server.address() as AddressInfo).port }));
  exitWithParent();
  process.once('SIGTERM', () => {
    server.close(() => process.exit(0));
    server.closeIdleConnections();
  });
}

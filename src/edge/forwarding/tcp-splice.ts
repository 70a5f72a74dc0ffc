import type { Duplex } from 'node:stream';

/**
 * The bytes of a TCP tunnel, both ways, between the client's side (a CONNECT socket, a WebSocket tunnel's
 * byte stream) and the sandbox port's (plan.bytes): piped with backpressure, so a side that does not read
 * stops the other from being read — neither end buffers more than its stream's high-water mark (a relay
 * stream's credit bounds it the same way). Idle for `idleTimeoutMs` either way (0 = never), both close.
 */

export interface SpliceEvents {
  /** Bytes went through (either way): the sandbox port's activity. */
  readonly activity?: (() => void) | undefined;
  /** Both sides are closed: bytes from the client to the sandbox, and back. */
  readonly closed?: ((bytesUp: number, bytesDown: number) => void) | undefined;
}

export function spliceTcp(client: Duplex, up: Duplex, idleTimeoutMs: number, e: SpliceEvents): void {
  let bytesUp = 0;
  let bytesDown = 0;
  const cut = (): void => {
    client.destroy();
    up.destroy();
  };
  // One timer per tunnel, pushed back by each chunk (Timeout#refresh re-arms it in place).
  const idle = idleTimeoutMs > 0 ? setTimeout(cut, idleTimeoutMs) : undefined;
  idle?.unref();
  const activity = e.activity;
  client.on('data', (chunk: Buffer) => {
    bytesUp += chunk.length;
    idle?.refresh();
    activity?.();
  });
  up.on('data', (chunk: Buffer) => {
    bytesDown += chunk.length;
    idle?.refresh();
    activity?.();
  });
  client.on('error', cut);
  up.on('error', cut);
  // The client gone, nothing more can reach it; the sandbox's side done, what it sent still drains to the client first.
  client.once('close', () => up.destroy());
  up.once('close', () => {
    if (!client.destroyed) client.end();
  });
  let reported = false;
  const done = (): void => {
    if (reported || !client.destroyed || !up.destroyed) return;
    reported = true;
    if (idle !== undefined) clearTimeout(idle);
    e.closed?.(bytesUp, bytesDown);
  };
  client.once('close', done);
  up.once('close', done);
  up.pipe(client);
  client.pipe(up);
}

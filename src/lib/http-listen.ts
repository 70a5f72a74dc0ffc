import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * Starting and stopping the gateway's HTTP listeners, one way for all of them (admin, proxy, relay,
 * supervisor): listen and report the bound port (port 0 picks a free one), and close gracefully — stop
 * accepting, close idle keep-alive connections at once, let requests in flight finish for up to
 * `graceMs`, then cut what is left.
 */

export function listenOn(server: Server, host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve((server.address() as AddressInfo).port);
    });
  });
}

export function closeGracefully(server: Server, graceMs: number): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      server.closeAllConnections();
      resolve();
    }, graceMs);
    timer.unref();
    server.close(() => {
      clearTimeout(timer);
      resolve();
    });
    server.closeIdleConnections();
  });
}

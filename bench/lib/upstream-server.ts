import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { announceReady, exitWithParent } from './ipc.js';
import { UPSTREAM_BODY } from './loopback-sandboxes.js';

/**
 * The sandbox the proxy benches forward to: a bare node:http server answering every request with the
 * same small JSON body (UPSTREAM_BODY). The body names this server, so a probe through a proxy can tell
 * that the request reached it and nothing else.
 *
 *   node dist/bench/lib/upstream-server.js PORT
 */

const port = Number(process.argv[2] ?? '0');
const body = Buffer.from(UPSTREAM_BODY);
const head = { 'content-type': 'application/json', 'content-length': String(body.length) };

const server = createServer((req, res) => {
  // A request body is read and dropped, so a client sending one is never stalled by backpressure.
  req.resume();
  res.writeHead(200, head).end(body);
});
// Longer than any proxy's pool keep-alive, so the proxies, not the upstream, decide when to reconnect.
server.keepAliveTimeout = 65_000;
server.listen(port, '127.0.0.1', () => announceReady({ port: (server.address() as AddressInfo).port }));
exitWithParent();
process.once('SIGTERM', () => {
  server.close(() => process.exit(0));
  server.closeIdleConnections();
});

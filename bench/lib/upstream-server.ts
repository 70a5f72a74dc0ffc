import { createServer } from 'node:http';
import { serveHttpChild } from './ipc.js';
import { UPSTREAM_BODY } from './sandboxes.js';

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
serveHttpChild(server, port);

import { createServer } from 'node:http';
import { UPSTREAM_HEADER } from './envoy-requests.js';
import { serveHttpChild } from './ipc.js';
import { sandboxNamespace, sandboxName, sandboxUpstream } from './sandboxes.js';

/**
 * The HTTP baseline: a bare node:http server that answers every request the way sandgate's HTTP authz
 * answers an allowed one — 200, the upstream header and the sandbox header, no body — without deciding
 * anything. Same keep-alive settings as the gateway's admin listener.
 *
 *   node dist/bench/lib/bare-http-server.js PORT
 */

const port = Number(process.argv[2] ?? '0');
const UPSTREAM = sandboxUpstream(0);
const SANDBOX = sandboxNamespace(0) + '/' + sandboxName(0);

const server = createServer((_req, res) => {
  res.setHeader(UPSTREAM_HEADER, UPSTREAM);
  res.setHeader('x-sandgate-sandbox', SANDBOX);
  res.writeHead(200).end();
});
serveHttpChild(server, port);

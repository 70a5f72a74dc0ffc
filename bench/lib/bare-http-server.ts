import { createServer, type RequestListener } from 'node:http';
import { UPSTREAM_HEADER } from './envoy-requests.js';
import { serveHttpChild } from './ipc.js';
import { sandboxNamespace, sandboxName, sandboxUpstream, UPSTREAM_BODY } from './sandboxes.js';

/**
 * The bench's bare node:http servers, deciding nothing, with the keep-alive settings of the gateway's
 * listeners:
 *
 * - `authz`, the HTTP authz baseline: answers every request the way sandgate's HTTP authz answers an
 *   allowed one — 200, the upstream header and the sandbox header, no body;
 * - `upstream`, the sandbox the proxy sections forward to: UPSTREAM_BODY to every request. The body names
 *   this server, so a probe through a proxy can tell that the request reached it and nothing else.
 *
 *   node dist/bench/lib/bare-http-server.js PORT authz|upstream
 */

const UPSTREAM = sandboxUpstream(0);
const SANDBOX = sandboxNamespace(0) + '/' + sandboxName(0);
const body = Buffer.from(UPSTREAM_BODY);
const head = { 'content-type': 'application/json', 'content-length': String(body.length) };

const answers: Readonly<Record<'authz' | 'upstream', RequestListener>> = {
  authz: (_req, res) => {
    res.setHeader(UPSTREAM_HEADER, UPSTREAM);
    res.setHeader('x-sandgate-sandbox', SANDBOX);
    res.writeHead(200).end();
  },
  upstream: (req, res) => {
    // A request body is read and dropped, so a client sending one is never stalled by backpressure.
    req.resume();
    res.writeHead(200, head).end(body);
  },
};

const mode = process.argv[3];
if (mode !== 'authz' && mode !== 'upstream') throw new Error('usage: bare-http-server PORT authz|upstream');
serveHttpChild(createServer(answers[mode]), Number(process.argv[2] ?? '0'));

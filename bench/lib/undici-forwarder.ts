import { createServer, type IncomingHttpHeaders } from 'node:http';
import { Agent } from 'undici';
import { serveHttpChild } from './ipc.js';

/**
 * A Node proxy written the plain way: a node:http server that sends every request to one fixed upstream
 * through undici (an Agent's keep-alive pool, `stream()` writing the response straight into the
 * client's), with no routing, no decision and no header handling beyond dropping hop-by-hop headers.
 * The embedded proxy does all of this plus a decision per request; the gap between the two is its cost.
 *
 *   node dist/bench/lib/undici-forwarder.js PORT UPSTREAM_HOST:PORT
 */

const upstream = process.argv[3];
if (upstream === undefined) throw new Error('usage: undici-forwarder PORT UPSTREAM_HOST:PORT');
const origin = 'http://' + upstream;

// RFC 9110 §7.6.1: never forwarded in either direction.
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'proxy-authenticate', 'proxy-authorization']);

const agent = new Agent({ connect: { noDelay: true }, keepAliveTimeout: 4_000 });

function responseHeaders(h: IncomingHttpHeaders): IncomingHttpHeaders {
  const out: IncomingHttpHeaders = {};
  for (const k in h) if (!HOP_BY_HOP.has(k)) out[k] = h[k];
  return out;
}

const server = createServer((req, res) => {
  const raw = req.rawHeaders;
  const headers: string[] = [];
  for (let i = 0; i < raw.length; i += 2) if (!HOP_BY_HOP.has(raw[i]!.toLowerCase())) headers.push(raw[i]!, raw[i + 1]!);
  const hasBody = req.headers['transfer-encoding'] !== undefined || (req.headers['content-length'] !== undefined && req.headers['content-length'] !== '0');
  agent.stream(
    { origin, path: req.url ?? '/', method: req.method as 'GET', headers, body: hasBody ? req : null },
    ({ statusCode, headers: h }) => {
      res.writeHead(statusCode, responseHeaders(h as IncomingHttpHeaders));
      return res;
    },
    (err) => {
      if (err === null) return;
      if (!res.headersSent) res.writeHead(502).end();
      else res.destroy();
    },
  );
});
serveHttpChild(server, Number(process.argv[2] ?? '0'));

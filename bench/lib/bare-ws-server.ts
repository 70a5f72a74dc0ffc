import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { WebSocketServer } from 'ws';
import { SUBPROTOCOL, SUPERVISOR_PATH } from '../../src/sessions/supervisor-protocol.js';
import { announceReady, exitWithParent } from './ipc.js';

/**
 * The sessions baseline: a bare `ws` server on the supervisor path that holds each connection the way the
 * gateway does at the wire — accepts the subprotocol, answers hello with `accepted` and ping with pong,
 * pings every heartbeat interval — but checks no token, records no presence and keeps no view.
 *
 *   node dist/bench/lib/bare-ws-server.js PORT
 */

const port = Number(process.argv[2] ?? '0');
const HEARTBEAT_MS = 5000;

const http = createServer((_req, res) => res.writeHead(426).end());
const wss = new WebSocketServer({
  noServer: true,
  perMessageDeflate: false,
  handleProtocols: (offered) => (offered.has(SUBPROTOCOL) ? SUBPROTOCOL : false),
});
http.on('upgrade', (req, socket, head) => {
  if ((req.url ?? '').split('?', 1)[0] !== SUPERVISOR_PATH) {
    socket.destroy();
    return;
  }
  wss.handleUpgrade(req, socket, head, (ws) => {
    ws.on('error', () => {});
    ws.on('message', (data) => {
      const m = JSON.parse(data.toString()) as { type?: string; t?: number };
      if (m.type === 'hello') ws.send(JSON.stringify({ type: 'accepted', sessionId: randomUUID(), epoch: 1, heartbeatIntervalMs: HEARTBEAT_MS }));
      else if (m.type === 'ping') ws.send(JSON.stringify({ type: 'pong', t: m.t }));
    });
  });
});
const pinger = setInterval(() => {
  const ping = JSON.stringify({ type: 'ping', t: Date.now() });
  for (const ws of wss.clients) ws.send(ping);
}, HEARTBEAT_MS);
http.listen(port, '127.0.0.1', () => announceReady({ port: (http.address() as AddressInfo).port }));
exitWithParent();
process.once('SIGTERM', () => {
  clearInterval(pinger);
  for (const ws of wss.clients) ws.terminate();
  http.close(() => process.exit(0));
});

import { EventEmitter } from 'node:events';
import type { Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConnectionGuard } from '../../src/lib/connection-guard.js';
import { createStreamingServer, listenOn } from '../../src/lib/http-listen.js';
import { RequestGuard } from '../../src/lib/request-guard.js';
import { createLogger, MemoryLogSink } from '../../src/observability/logger.js';
import { GatewayMetrics } from '../../src/observability/metrics.js';
import { RawClient } from '../helpers/raw-http-client.js';

/**
 * The last line behind the listeners: a handler that throws — in its own call, in an event listener it
 * hung on something that fires later, after its answer started, or while handling an upgrade — ends that
 * request only. The server goes on answering, the fault is logged with the request's context (and not its
 * query, which may hold a credential) and counted in sandgate_http_handler_errors_total.
 */

const sink = new MemoryLogSink();
const metrics = new GatewayMetrics({ size: 0, phaseCounts: () => new Map(), refusedIdCounts: () => ({}) }, false);
const guard = new RequestGuard('proxy', createLogger('info', sink), metrics.handlerErrors('proxy'));
const later = new EventEmitter();
let server: Server;
let port = 0;

beforeAll(async () => {
  server = createStreamingServer(
    (req, res) => {
      if (req.url === '/throw-after-head') {
        res.writeHead(200, ['content-length', '10']);
        res.write('part');
        throw new Error('a bug after the head');
      }
      if (req.url?.startsWith('/throw') === true) throw new Error('a bug in the handler');
      if (req.url === '/later') {
        later.once('fire', guard.bind(req, res, () => {
          throw new Error('a bug in a listener');
        }));
        return void setImmediate(() => later.emit('fire'));
      }
      res.end('ok');
    },
    () => {
      throw new Error('a bug in the upgrade handler');
    },
    guard,
  );
  port = await listenOn(server, '127.0.0.1', 0, new ConnectionGuard('proxy'));
});

afterAll(() => new Promise<void>((r) => server.close(() => r())));

async function send(bytes: string) {
  const c = new RawClient(port);
  c.write(bytes);
  try {
    return await c.read();
  } finally {
    c.close();
  }
}

async function faults(): Promise<number> {
  const m = await metrics.registry.getSingleMetric('sandgate_http_handler_errors_total')!.get();
  return m.values.find((v) => v.labels.listener === 'proxy')?.value ?? 0;
}

describe('an exception in one request\'s handling ends that request, never the process', () => {
  it('a throw in the handler: 500 internal_error, logged with the request (no query) and counted', async () => {
    const before = await faults();
    const a = await send('GET /throw?token=secret-value HTTP/1.1\r\nhost: box.example\r\n\r\n');
    expect(a?.status).toBe(500);
    expect(JSON.parse(a!.body)).toMatchObject({ code: 'internal_error' });
    expect(await faults()).toBe(before + 1);
    const line = sink.find((l) => l.msg !== undefined && String(l.msg).includes('the gateway goes on') && l.path === '/throw');
    expect(line).toMatchObject({ level: 50, listener: 'proxy', method: 'GET', host: 'box.example', path: '/throw', source: '127.0.0.1' });
    expect(sink.raw.join('')).not.toContain('secret-value');
  });

  it('a throw in an event listener the handler hung: 500 internal_error', async () => {
    const a = await send('GET /later HTTP/1.1\r\nhost: x\r\n\r\n');
    expect(a?.status).toBe(500);
  });

  it('a throw after the head went out: the connection is cut, the response never completes', async () => {
    const c = new RawClient(port);
    c.write('GET /throw-after-head HTTP/1.1\r\nhost: x\r\n\r\n');
    expect(await c.read()).toBeUndefined();
    c.close();
  });

  it('a throw while handling an upgrade: that socket is closed', async () => {
    const c = new RawClient(port);
    c.write('GET /ws HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n');
    await c.closedByServer();
    c.close();
  });

  it('the server still answers', async () => {
    const a = await send('GET /ok HTTP/1.1\r\nhost: x\r\n\r\n');
    expect([a?.status, a?.body]).toEqual([200, 'ok']);
    expect(await faults()).toBe(4);
  });
});

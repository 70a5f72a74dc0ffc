import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';

/**
 * The console's browser modules that need no DOM, run in Node (which has fetch and TextDecoderStream): the
 * SSE reader against a real server that splits and varies its line ends, drops the stream and refuses a
 * key; the chart quantiles. The modules are plain JS shipped to browsers, hence the untyped imports.
 */

const ASSETS = new URL('../../assets/console/', import.meta.url).href;
const { followEvents } = (await import(ASSETS + 'sse-reader.js')) as { followEvents: (o: any) => { stop(): void } };
const { quantile } = (await import(ASSETS + 'charts.js')) as { quantile: (q: number, le: (number | null)[], before: number[], after: number[]) => number | null };

let server: Server | undefined;
afterEach(() => new Promise<void>((resolve) => (server === undefined ? resolve() : server.close(() => resolve()))));

/** A server whose n-th request (0-based) is answered by `handlers[n]`; resolves with its base URL. */
async function serve(handlers: ((res: ServerResponse, headers: IncomingHttpHeaders) => void)[]): Promise<{ url: string; requests: IncomingHttpHeaders[] }> {
  const requests: IncomingHttpHeaders[] = [];
  server = createServer((req, res) => {
    requests.push(req.headers);
    const h = handlers[requests.length - 1];
    if (h === undefined) return void res.writeHead(503).end();
    h(res, req.headers);
  });
  await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}/watch`, requests };
}

describe('sse-reader.js', () => {
  it('parses LF, CRLF and CR line ends split anywhere, comments, multi-line data and ids; resumes after a drop with Last-Event-ID', async () => {
    const { url, requests } = await serve([
      (res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        // Chunks cut inside a CRLF, inside a field name and between the two lines of one data field.
        const chunks = [': ping\n\nevent: reset\r', '\ndata: {}\r\n\r\nid: 7\nev', 'ent: upsert\ndata: {"a":\ndata: 1}\n\n', 'id: 8\revent: delete\rdata: x\r\r'];
        let i = 0;
        const next = (): void => {
          if (i < chunks.length) res.write(chunks[i++], () => setImmediate(next));
          else res.destroy();
        };
        next();
      },
      (res) => {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        res.write('id: 9\nevent: upsert\ndata: {"b":2}\n\n');
      },
    ]);
    const events: [string, string, string | undefined][] = [];
    const states: string[] = [];
    const done = new Promise<void>((resolve) => {
      const reader = followEvents({
        url,
        headers: () => ({ 'x-api-key': 'k' }),
        onEvent: (type: string, data: string, id: string | undefined) => {
          events.push([type, data, id]);
          if (id === '9') {
            reader.stop();
            resolve();
          }
        },
        onState: (s: string) => states.push(s),
      });
    });
    await done;
    expect(events).toEqual([
      ['reset', '{}', undefined],
      ['upsert', '{"a":\n1}', '7'],
      ['delete', 'x', '8'],
      ['upsert', '{"b":2}', '9'],
    ]);
    expect(requests[0]!['last-event-id']).toBeUndefined();
    expect(requests[1]!['last-event-id']).toBe('8');
    expect(requests.every((h) => h['x-api-key'] === 'k')).toBe(true);
    expect(states).toEqual(['live', 'reconnecting', 'live']);
  });

  it('a refused key stops the reader and reports the answer; it does not retry', async () => {
    const { url, requests } = await serve([(res) => res.writeHead(401, { 'content-type': 'application/json' }).end('{"code":"api_key_invalid","message":"The API key is unknown or revoked"}')]);
    const state = await new Promise<[string, any]>((resolve) => {
      followEvents({ url, headers: () => ({}), onEvent: () => undefined, onState: (s: string, d: unknown) => s === 'unauthorized' && resolve([s, d]) });
    });
    expect(state).toEqual(['unauthorized', { status: 401, body: { code: 'api_key_invalid', message: 'The API key is unknown or revoked' } }]);
    expect(requests).toHaveLength(1);
  });
});

describe('charts.js quantile', () => {
  const le = [1e-6, 1e-5, 1e-4, null];
  it.each([
    ['nothing observed', 0.5, [0, 0, 0, 0], [0, 0, 0, 0], null],
    ['all in the first bucket: interpolated from 0', 0.5, [0, 0, 0, 0], [10, 10, 10, 10], 0.5e-6],
    ['only the difference between samples counts', 0.5, [10, 10, 10, 10], [10, 20, 20, 20], 5.5e-6],
    ['p99 in the +Inf bucket: the highest finite bound', 0.99, [0, 0, 0, 0], [0, 0, 0, 100], 1e-4],
  ])('%s', (_name, q, before, after, want) => {
    const got = quantile(q as number, le, before as number[], after as number[]);
    if (want === null) expect(got).toBeNull();
    else expect(got).toBeCloseTo(want as number, 12);
  });
});

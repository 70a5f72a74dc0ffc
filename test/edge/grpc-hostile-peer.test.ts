import { connect, type ClientHttp2Session } from 'node:http2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GrpcStatus } from '../../src/lib/grpc-h2-server.js';
import { eventually } from '../helpers/eventually.js';
import { clusterFiles, startGatewayProcess, type GatewayProcess } from '../helpers/gateway-process.js';
import { frame, open, PROCESS, PROCESS_PATH, reply, statusOf, CHECK_PATH } from '../helpers/grpc-wire.js';
import { grpcHeaders, rawH2 } from '../helpers/raw-h2.js';

/**
 * One unauthenticated peer of the gRPC port against a real gateway process (dist/), its memory read from
 * the gateway's own `process_resident_memory_bytes`: idle streams, messages that never complete, ext_proc
 * messages queued behind a readiness wait, and answers it never reads. Each is bounded per connection,
 * with a typed refusal where there is one. Margins are generous: the point is growth that does not follow
 * what the peer sends.
 */

const MIB = 1024 * 1024;

let gw: GatewayProcess;

beforeAll(async () => {
  const files = clusterFiles(
    'sandboxes:\n  - {namespace: a, name: web, address: 127.0.0.1, supervisor: none}\n  - {namespace: a, name: wait, address: 127.0.0.1}\n',
  );
  gw = await startGatewayProcess('gw-hostile-grpc', ['--sandboxes', files.sandboxes, '--proxy', 'false']);
});

afterAll(async () => {
  gw?.signal('SIGKILL');
  await gw?.exited();
});

async function rss(): Promise<number> {
  const text = await (await fetch(`${gw.admin}/metrics`)).text();
  const m = /^process_resident_memory_bytes (\d+)/m.exec(text);
  if (m === null) throw new Error('no process_resident_memory_bytes in /metrics');
  return Number(m[1]);
}

function client(settings: Parameters<typeof connect>[1] = {}): ClientHttp2Session {
  // The client's own session memory cap (10 MB by default) would refuse its streams first.
  const session = connect(`http://127.0.0.1:${gw.grpcPort}`, { maxSessionMemory: 10_000, ...settings });
  session.on('error', () => {});
  return session;
}

const headersFor = (host: string): Buffer =>
  PROCESS.requestSerialize({ request_headers: { headers: { headers: [{ key: ':authority', raw_value: Buffer.from(host) }, { key: ':path', raw_value: Buffer.from('/') }] } } });

describe('gRPC port: one hostile connection costs bounded memory', () => {
  it('40,000 streams opened at once: all but 100 refused with RST_STREAM REFUSED_STREAM', async () => {
    const before = await rss();
    const r = await rawH2(gw.grpcPort);
    try {
      const count = 40_000;
      const batch: Buffer[] = [];
      for (let i = 0; i < count; i++) batch.push(grpcHeaders(2 * i + 1, CHECK_PATH));
      r.write(Buffer.concat(batch));
      // Past the first 100, streams are refused; nghttp2 may end a connection that keeps opening refused
      // streams with GOAWAY (node's maxSessionRejectedStreams), resetting the ones it had accepted.
      await eventually(() => r.closed || r.resets().size >= count - 100, 20_000, () => `refusals, saw ${r.resets().size}`);
      const pastBound = [...r.resets()].filter(([id]) => id > 2 * 100);
      expect(pastBound.length).toBeGreaterThan(100);
      expect(new Set(pastBound.map(([, code]) => code))).toEqual(new Set([7])); // REFUSED_STREAM
      expect((await rss()) - before).toBeLessThan(60 * MIB);
    } finally {
      r.destroy();
    }
  });

  it('40 calls each sending most of a 4 MiB message: refused with RESOURCE_EXHAUSTED past the connection bound', async () => {
    const before = await rss();
    const session = client();
    try {
      const part = Buffer.alloc(5 + 4 * MIB - 1024);
      part.writeUInt32BE(4 * MIB, 1);
      const statuses: number[] = [];
      for (let i = 0; i < 40; i++) {
        const s = open(session, CHECK_PATH);
        s.write(part);
        void reply(s).then((r) => statuses.push(statusOf(r)));
      }
      // Three fit in the connection's 16 MiB and stay open, incomplete; the others are refused.
      await eventually(() => statuses.length >= 37, 20_000, () => `refusals, saw ${statuses.length}`);
      expect(statuses.filter((c) => c === GrpcStatus.RESOURCE_EXHAUSTED).length).toBeGreaterThanOrEqual(36);
      expect((await rss()) - before).toBeLessThan(80 * MIB);
    } finally {
      session.destroy();
    }
  });

  // Measured like the connection bound above (RSS before and after one hostile session); the bound under
  // test is another one, the per-stream queue, with its own status.
  it('ext_proc messages queued behind a readiness wait: RESOURCE_EXHAUSTED past the bytes or the count a stream may queue', async () => {
    const before = await rss();
    const session = client();
    try {
      const body = frame(PROCESS.requestSerialize({ request_body: { body: Buffer.alloc(3 * MIB) } }));
      const big = Array.from({ length: 20 }, () => {
        const s = open(session, PROCESS_PATH);
        s.write(frame(headersFor('80-wait.a.localhost')));
        for (let i = 0; i < 3; i++) s.write(body);
        return reply(s);
      });
      const small = open(session, PROCESS_PATH);
      small.write(frame(headersFor('80-wait.a.localhost')));
      small.write(Buffer.concat(Array.from({ length: 100 }, () => frame(PROCESS.requestSerialize({ request_body: {} })))));
      const many = await reply(small);
      expect(statusOf(many)).toBe(GrpcStatus.RESOURCE_EXHAUSTED);
      const answers = await Promise.all(big);
      expect(answers.filter((r) => statusOf(r) === GrpcStatus.RESOURCE_EXHAUSTED).length).toBe(20);
      expect((await rss()) - before).toBeLessThan(80 * MIB);
    } finally {
      session.destroy();
    }
  });

  it('a peer advertising a zero window while sending many small request_body messages: the gateway stops reading, memory stays flat', async () => {
    const before = await rss();
    const session = client({ settings: { initialWindowSize: 0 } });
    try {
      const s = open(session, PROCESS_PATH);
      s.on('error', () => {});
      const one = frame(PROCESS.requestSerialize({ request_body: {} }));
      // 7 MB of requests: a gateway that reads them all buffers the 1M answers it cannot send (~190 MB).
      let flushed = false;
      s.write(Buffer.concat([frame(headersFor('80-web.a.localhost')), ...Array.from({ length: 1_000_000 }, () => one)]), () => (flushed = true));
      // Sampled until the gateway has read all of it (it did not stop) or its memory has settled: twenty
      // samples, the last five within 2 MiB of each other.
      const ping = (): Promise<void> => new Promise((resolve) => session.ping(() => resolve()));
      const samples: number[] = [];
      while (!flushed && (samples.length < 20 || samples.at(-1)! - samples.at(-5)! > 2 * MIB)) {
        await ping();
        samples.push(await rss());
      }
      expect(flushed).toBe(false);
      expect((await rss()) - before).toBeLessThan(60 * MIB);
    } finally {
      session.destroy();
    }
  });
});

import { connect, type Socket } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { BackendSnapshot } from '../../src/domain/sandbox.js';
import { eventually } from '../helpers/eventually.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { CHECK, CHECK_PATH, checkRequest, frame as grpcFrame, messages } from '../helpers/grpc-wire.js';
import { data, FRAME, grpcHeaders, rawH2 } from '../helpers/raw-h2.js';
import { startRedisServer, type RedisServer } from '../helpers/redis-server.js';
import { cond, snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';

/**
 * `--max-running-per-namespace` against requests that arrive together: six wakes for six paused sandboxes
 * of one namespace, with a limit of 1, wake exactly one — as HTTP/2 streams in one write, as parallel and
 * as pipelined HTTP/1.1, and spread over two gateways sharing Redis. The driver never reports the woken
 * sandbox, the widest window there is: only the resume in flight can count against the limit.
 */

const cleanup: (() => Promise<unknown> | void)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

const NAMES = ['s1', 's2', 's3', 's4', 's5', 's6'];
const paused = (name: string): BackendSnapshot =>
  snapshot({ name, uid: `uid-${name}`, sessionModel: 'none', state: 'paused', resumeOnTraffic: true, conditions: [cond('Ready', 'False', 'SandboxPaused')], endpoint: { kind: 'address', addresses: ['127.0.0.1'] } });

/** A driver whose resumes never finish: every woken sandbox stays Paused in the view. */
function sleepyDriver(): TestDriver {
  const driver = new TestDriver(NAMES.map(paused));
  driver.onResume = () => new Promise(() => undefined);
  return driver;
}

async function gateway(driver: TestDriver, over: Record<string, unknown> = {}): Promise<TestGateway> {
  const t = await startTestGateway([driver], { maxRunningPerNamespace: 1, readinessWaitMs: 300, ...over });
  cleanup.push(() => t.close());
  return t;
}

const request = (name: string) => `GET / HTTP/1.1\r\nhost: 8000-${name}.team-a.localhost\r\nconnection: close\r\n\r\n`;
const codeOf = (answer: string) => /x-sandgate-error: (\S+)/i.exec(answer)?.[1];

/** Opens one socket per request, then writes every request in the same turn of the event loop. */
async function parallel(port: number, names: readonly string[]): Promise<string[]> {
  const sockets = await Promise.all(names.map(() => new Promise<Socket>((resolve, reject) => {
    const s = connect(port, '127.0.0.1', () => resolve(s));
    s.once('error', reject);
  })));
  const answers = sockets.map((s) => new Promise<string>((resolve) => {
    let text = '';
    s.setEncoding('latin1');
    s.on('data', (d: string) => (text += d));
    s.on('close', () => resolve(text));
  }));
  sockets.forEach((s, i) => s.write(request(names[i]!)));
  return Promise.all(answers);
}

const tally = (codes: (string | undefined)[]) => codes.filter((c) => c === 'namespace_quota_exceeded').length;

describe('resumes in flight count against --max-running-per-namespace', () => {
  it('six ext_authz calls as HTTP/2 streams in one write wake exactly one sandbox', async () => {
    const driver = sleepyDriver();
    const t = await gateway(driver);
    const h2 = await rawH2(t.gw.grpcPort);
    cleanup.push(() => h2.destroy());
    const streams = NAMES.map((_, i) => 2 * i + 1);
    h2.write(Buffer.concat(NAMES.flatMap((name, i) => [grpcHeaders(streams[i]!, CHECK_PATH), data(streams[i]!, grpcFrame(checkRequest(`8000-${name}.team-a.localhost`)), true)])));
    const ended = () => new Set(h2.frames.filter((f) => f.type === FRAME.HEADERS && (f.flags & 0x1) !== 0).map((f) => f.stream));
    await eventually(() => ended().size === NAMES.length, 10_000, () => `six answers (have ${ended().size})`);
    const codes = streams.map((id) => {
      const body = Buffer.concat(h2.frames.filter((f) => f.type === FRAME.DATA && f.stream === id).map((f) => f.payload));
      const answer = CHECK.responseDeserialize(messages(body)[0]!) as { denied_response?: { body: string } };
      return (JSON.parse(answer.denied_response!.body) as { code: string }).code;
    });
    expect(driver.resumed).toHaveLength(1);
    expect(tally(codes)).toBe(5);
  });

  it('six parallel HTTP/1.1 requests written in one turn wake exactly one sandbox', async () => {
    const driver = sleepyDriver();
    const t = await gateway(driver);
    const answers = await parallel(t.gw.proxyPort!, NAMES);
    expect(driver.resumed).toHaveLength(1);
    expect(tally(answers.map(codeOf))).toBe(5);
  });

  it('six pipelined HTTP/1.1 requests wake exactly one sandbox, though the first is answered before the next is read', async () => {
    const driver = sleepyDriver();
    const t = await gateway(driver);
    const s = connect(t.gw.proxyPort!, '127.0.0.1');
    cleanup.push(() => void s.destroy());
    let text = '';
    s.setEncoding('latin1');
    s.on('data', (d: string) => (text += d));
    s.write(NAMES.map((n) => request(n).replace('connection: close', 'connection: keep-alive')).join(''));
    await eventually(() => (text.match(/HTTP\/1\.1 \d{3} /g) ?? []).length === NAMES.length, 10_000, () => `six answers in ${JSON.stringify(text)}`);
    const codes = [...text.matchAll(/x-sandgate-error: (\S+)/gi)].map((m) => m[1]);
    expect(driver.resumed).toHaveLength(1);
    expect(codes[0]).toBe('sandbox_not_ready');
    expect(tally(codes)).toBe(5);
  });
});

describe('resumes in flight count across gateways sharing Redis', () => {
  let redis: RedisServer;
  beforeAll(async () => {
    redis = await startRedisServer();
  });
  afterAll(async () => {
    await redis?.stop();
  });

  it('six requests spread over two gateways in one turn wake exactly one sandbox between them', async () => {
    const common = { presence: redis.url, leaseTtlMs: 2000 };
    const da = sleepyDriver();
    const db = sleepyDriver();
    const a = await gateway(da, { ...common, gatewayId: 'gw-a' });
    const b = await gateway(db, { ...common, gatewayId: 'gw-b' });
    const [onA, onB] = await Promise.all([parallel(a.gw.proxyPort!, NAMES.slice(0, 3)), parallel(b.gw.proxyPort!, NAMES.slice(3))]);
    expect(da.resumed.length + db.resumed.length).toBe(1);
    expect(tally([...onA, ...onB].map(codeOf))).toBe(5);
  });

  it('a gateway that cannot reach Redis wakes nothing rather than count only what it sees', async () => {
    await redis.admin().flushall();
    const driver = sleepyDriver();
    // A wait longer than the Redis command timeout: the answer is the failed claim, not the wake budget.
    const t = await gateway(driver, { presence: redis.url, leaseTtlMs: 2000, gatewayId: 'gw-c', readinessWaitMs: 5000 });
    redis.pause();
    try {
      const [answer] = await parallel(t.gw.proxyPort!, ['s1']);
      expect(codeOf(answer!)).toBe('sandbox_resume_failed');
      expect(driver.resumed).toEqual([]);
    } finally {
      redis.resume();
    }
  });
});

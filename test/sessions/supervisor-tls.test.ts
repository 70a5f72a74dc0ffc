import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import { SupervisorClient } from '../../src/sessions/supervisor-client.js';
import { SUBPROTOCOL } from '../../src/sessions/supervisor-protocol.js';
import { mintSupervisorToken, type SupervisorKeys } from '../../src/sessions/supervisor-token.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';
import { makeCa, needsOpenssl, OPENSSL, type TestCa } from '../helpers/tls-certs.js';

/**
 * The supervisor endpoint over TLS (wss://) with a certificate from a private CA: the reference
 * supervisor (`sandgate supervisor --ca-file`) and the importable client connect with that CA and are
 * refused — before any token is sent — with another one.
 */

const CLI = fileURLToPath(new URL('../../dist/src/cli/main.js', import.meta.url));
const keys: SupervisorKeys = { keys: [{ kid: 'k', secret: randomBytes(32) }], audience: 'sandgate-supervisor' };

describe.skipIf(!OPENSSL)(needsOpenssl('the supervisor endpoint over wss://'), () => {
  let ca: TestCa;
  let other: TestCa;
  let t: TestGateway;
  let url: string;

  beforeAll(async () => {
    ca = makeCa('sandgate private CA');
    other = makeCa('someone else');
    const leaf = ca.issue('gateway', ['gateway.internal', 'localhost']);
    t = await startTestGateway(
      [new TestDriver([snapshot({ name: 'agent', endpoint: { kind: 'address', addresses: ['127.0.0.1'] } })])],
      { supervisorTlsCertFile: leaf.certFile, supervisorTlsKeyFile: leaf.keyFile, heartbeatIntervalMs: 200 },
      { supervisorKeys: keys },
    );
    url = `wss://localhost:${t.gw.supervisorPort!}`;
  });
  afterAll(async () => {
    await t?.close();
    ca?.remove();
    other?.remove();
  });

  it('the reference supervisor over wss:// with --ca-file: the sandbox becomes Ready', async () => {
    const token = await mintSupervisorToken(keys, 'team-a', 'agent', 3600);
    const proc = spawn(process.execPath, [CLI, 'supervisor', '--gateway', url, '--token', token, '--ca-file', ca.caFile], { stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      const accepted = await new Promise<string>((resolve, reject) => {
        let out = '';
        proc.stdout!.on('data', (d: Buffer) => {
          out += d.toString();
          if (out.includes('"msg":"accepted"')) resolve(out);
        });
        proc.once('exit', (code) => reject(new Error(`supervisor exited with ${code}: ${out}`)));
      });
      expect(accepted).toContain('"msg":"accepted"');
      expect(t.gw.view.get('team-a', 'agent')?.status.phase).toBe('Ready');
    } finally {
      proc.kill('SIGTERM');
      await new Promise((r) => proc.once('exit', r));
    }
  });

  it('the importable client with another CA is refused at the handshake; the gateway never sees its token', async () => {
    const token = await mintSupervisorToken(keys, 'team-a', 'agent', 3600);
    const client = new SupervisorClient({ gateway: url, token, namespace: 'team-a', name: 'agent', instanceId: 'i-wrong', ca: readFileSync(other.caFile), backoff: { initialMs: 50, maxMs: 50 } });
    const errors: string[] = [];
    client.on('error', (err: Error) => errors.push(err.message));
    const disconnected = new Promise<{ code: number; reason: string }>((resolve) => client.once('disconnected', resolve));
    client.start();
    try {
      const d = await disconnected;
      expect(d.code).not.toBe(1000);
      expect(t.gw.supervisors!.connections).toBe(0);
      expect(t.logs.lines.some((l) => l.part === 'sessions' && JSON.stringify(l).includes('i-wrong'))).toBe(false);
    } finally {
      client.stop();
    }
    // With the right CA the same client is accepted.
    const good = new SupervisorClient({ gateway: url, token, namespace: 'team-a', name: 'agent', instanceId: 'i-right', ca: readFileSync(ca.caFile) });
    const accepted = new Promise((resolve) => good.once('accepted', resolve));
    good.start();
    try {
      await accepted;
    } finally {
      good.stop();
    }
  });

  it('plain ws:// to the TLS endpoint gets no session (hostile: a downgrade)', async () => {
    const token = await mintSupervisorToken(keys, 'team-a', 'agent', 3600);
    const ws = new WebSocket(`ws://127.0.0.1:${t.gw.supervisorPort!}/v1/supervisor`, SUBPROTOCOL, { headers: { authorization: `Bearer ${token}` } });
    const outcome = await new Promise<string>((resolve) => {
      ws.once('open', () => resolve('open'));
      ws.once('error', (err) => resolve(`error ${err.message}`));
    });
    expect(outcome).toMatch(/^error/);
  });

  it('--supervisor-tls with no certificate configured refuses to start (config_invalid)', async () => {
    await expect(startTestGateway([new TestDriver([])], { supervisorTls: true }, { supervisorKeys: keys })).rejects.toMatchObject({ code: 'config_invalid', message: expect.stringContaining('--supervisor-tls') });
  });
});

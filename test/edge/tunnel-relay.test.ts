import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { relaySandbox, startGatewayPair, type GatewayPair } from '../helpers/relay-stack.js';
import { needsOpenssh, OPENSSH, runOpenssh, startSshd, type Sshd } from '../helpers/sshd.js';

/**
 * A relay-only sandbox (no inbound network) whose port 22 is a real sshd: OpenSSH reaches it through
 * `sandgate tunnel` over the sandbox's supervisor session — on the gateway holding the session (a relay
 * stream of its own), and through a second gateway (a CONNECT tunnel to the holder's relay listener).
 */

const CLI = fileURLToPath(new URL('../../dist/src/cli/main.js', import.meta.url));

describe.skipIf(!OPENSSH)(needsOpenssh('OpenSSH to a relay-only sandbox over its supervisor session'), () => {
  let sshd: Sshd;
  let pair: GatewayPair;

  beforeAll(async () => {
    sshd = await startSshd();
    pair = await startGatewayPair({ ...relaySandbox('ssh'), ports: [sshd.port], tcpPorts: [sshd.port] }, 'tunnel-relay');
  });
  afterAll(async () => {
    await pair?.close();
    sshd?.close();
  });

  const via = (proxyPort: number): string => `${process.execPath} ${CLI} tunnel team-a/ssh ${sshd.port} --gateway http://127.0.0.1:${proxyPort}`;

  it('through the gateway holding the session: a command runs', async () => {
    const r = await runOpenssh('ssh', sshd.keyFile, via(pair.b.proxy.port), ['root@team-a.ssh', 'echo ok-own-relay']);
    expect([r.code, r.stderr, r.stdout]).toEqual([0, '', 'ok-own-relay\n']);
  });

  it('through a second gateway: a command runs and scp copies a file byte for byte', async () => {
    const r = await runOpenssh('ssh', sshd.keyFile, via(pair.a.proxy.port), ['root@team-a.ssh', 'echo ok-peer-relay']);
    expect([r.code, r.stderr, r.stdout]).toEqual([0, '', 'ok-peer-relay\n']);
    const src = join(sshd.dir, 'payload-relay.bin');
    const dst = join(sshd.dir, 'copied-relay.bin');
    const payload = randomBytes(2 * 1024 * 1024);
    writeFileSync(src, payload);
    const c = await runOpenssh('scp', sshd.keyFile, via(pair.a.proxy.port), ['-q', src, `root@team-a.ssh:${dst}`]);
    expect([c.code, c.stderr]).toEqual([0, '']);
    expect(readFileSync(dst).equals(payload)).toBe(true);
  });

  it('through a second gateway over the WebSocket tunnel', async () => {
    const r = await runOpenssh('ssh', sshd.keyFile, `${via(pair.a.proxy.port)} --via websocket`, ['root@team-a.ssh', 'echo ok-peer-websocket']);
    expect([r.code, r.stderr, r.stdout]).toEqual([0, '', 'ok-peer-websocket\n']);
  });
});

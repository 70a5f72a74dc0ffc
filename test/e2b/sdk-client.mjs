// The E2B SDK, driven by a test over IPC. It runs in its own process because host mode is HTTPS-only
// (`https://<port>-<id>.<domain>`): the process must start with the test CA in NODE_EXTRA_CA_CERTS,
// which Node reads only at start-up. Everything else comes from the environment a user would set
// (E2B_API_URL, E2B_API_KEY, E2B_SANDBOX_URL or E2B_DOMAIN); E2B_TEST_PROXY, when set, is the HTTP
// proxy the SDK's documented `proxy` option sends requests through (it stands in for wildcard DNS).
import { Buffer } from 'node:buffer';
import { createHash } from 'node:crypto';
import process from 'node:process';
import { Sandbox } from 'e2b';
import { Agent, ProxyAgent, fetch } from 'undici';

const proxy = process.env.E2B_TEST_PROXY || undefined;
const dispatcher = proxy ? new ProxyAgent({ uri: proxy }) : new Agent();
const sandboxes = new Map();
const running = new Map();

/** Deterministic bytes of a given size, the same the test computes. */
function pattern(size) {
  const buf = Buffer.allocUnsafe(size);
  let seed = 0x2545f491;
  for (let i = 0; i < size; i++) {
    seed = (seed * 1103515245 + 12345) >>> 0;
    buf[i] = seed >>> 24;
  }
  return buf;
}

const sha256 = (b) => createHash('sha256').update(b).digest('hex');

function sbx(key) {
  const s = sandboxes.get(key);
  if (s === undefined) throw new Error(`no sandbox ${key}`);
  return s;
}

const ops = {
  async connect({ key, id }) {
    const s = await Sandbox.connect(id, { proxy });
    sandboxes.set(key, s);
    return { sandboxId: s.sandboxId, trafficAccessToken: s.trafficAccessToken ?? null, host: s.getHost(3000) };
  },
  isRunning: ({ key }) => sbx(key).isRunning(),
  async write({ key, path, text, size }) {
    const info = await sbx(key).files.write(path, text ?? pattern(size));
    return { path: info.path };
  },
  async read({ key, path }) {
    const bytes = await sbx(key).files.read(path, { format: 'bytes' });
    return { length: bytes.length, sha256: sha256(bytes), text: bytes.length < 4096 ? Buffer.from(bytes).toString('utf8') : undefined };
  },
  async run({ key, cmd, runId, timeoutMs }, emit) {
    const ctrl = new globalThis.AbortController();
    running.set(runId, ctrl);
    try {
      const r = await sbx(key).commands.run(cmd, {
        timeoutMs,
        signal: ctrl.signal,
        onStdout: (data) => emit({ runId, stdout: data }),
      });
      return { exitCode: r.exitCode, stdout: r.stdout, stderr: r.stderr };
    } finally {
      running.delete(runId);
    }
  },
  /** A pty session: type a command and `exit`, collect what the terminal printed. */
  async pty({ key }) {
    const s = sbx(key);
    const chunks = [];
    const handle = await s.pty.create({ cols: 80, rows: 24, onData: (d) => chunks.push(Buffer.from(d)) });
    await s.pty.sendInput(handle.pid, Buffer.from('echo pty-$((6*7))\nexit 0\n'));
    const r = await handle.wait();
    return { exitCode: r.exitCode, output: Buffer.concat(chunks).toString('utf8') };
  },
  abort({ runId }) {
    running.get(runId)?.abort();
    return true;
  },
  /** A user port the way the SDK's docs reach one: `https://${sbx.getHost(port)}`, or the shared URL with E2B headers. */
  async userPort({ key, port, token }) {
    const s = sbx(key);
    const headers = {};
    if (token) headers['e2b-traffic-access-token'] = s.trafficAccessToken;
    let url;
    if (process.env.E2B_SANDBOX_URL) {
      url = process.env.E2B_SANDBOX_URL + '/hello';
      headers['E2b-Sandbox-Id'] = s.sandboxId;
      headers['E2b-Sandbox-Port'] = String(port);
    } else {
      url = `https://${s.getHost(port)}/hello`;
    }
    const res = await fetch(url, { headers, dispatcher });
    return { status: res.status, body: await res.text() };
  },
};

process.on('message', async ({ id, op, args }) => {
  const emit = (event) => process.send({ id, event });
  try {
    const value = await ops[op](args, emit);
    process.send({ id, value });
  } catch (err) {
    process.send({ id, error: { name: err?.name ?? 'Error', className: err?.constructor?.name, message: String(err?.message ?? err), exitCode: err?.exitCode, stdout: err?.stdout, stderr: err?.stderr } });
  }
});
process.send({ ready: true });

import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { eventually } from './eventually.js';

/**
 * A private redis-server for one test file: its own port, no persistence (`--save "" --appendonly no`),
 * so a test can kill it, restart it empty on the same port, or pause it (SIGSTOP) like a hung server.
 */
export interface RedisServer {
  readonly port: number;
  readonly url: string;
  /** SIGTERM and wait for exit. */
  stop(): Promise<void>;
  /** SIGKILL (a crash) and wait for exit. */
  kill(): Promise<void>;
  /** Starts again on the same port (stopping first if running); resolves once it answers PING. */
  restart(): Promise<void>;
  /** SIGSTOP: the socket stays open but nothing is answered. */
  pause(): void;
  /** SIGCONT. */
  resume(): void;
  /** A plain client for inspecting and tampering with the server (closed by stop()/kill()). */
  admin(): Redis;
}

/**
 * A port free on 127.0.0.1 now, for a server started later (and maybe restarted on it). It is drawn from
 * below the kernel's ephemeral range: a port from that range (what `listen(0)` hands out) can be taken
 * meanwhile as the local end of any outgoing connection (a gateway's Redis client, say), and the server
 * then fails to start with the port in use. With `plus`, the port `plus` above it is free too (a Redis
 * Cluster node's bus port), and below the ephemeral range as well.
 */
export async function freePort(plus = 0): Promise<number> {
  const high = ephemeralStart() - plus;
  if (high <= LOWEST_PORT) throw new Error(`no port between ${LOWEST_PORT} and the ephemeral range with the port ${plus} above it free too`);
  for (let attempt = 0; attempt < 100; attempt++) {
    const port = LOWEST_PORT + Math.floor(Math.random() * (high - LOWEST_PORT));
    if ((await bindable(port)) && (plus === 0 || (await bindable(port + plus)))) return port;
  }
  throw new Error(`no free port below ${high}${plus === 0 ? '' : ` with the port ${plus} above it free too`}`);
}

const LOWEST_PORT = 10_000;

/** The first port of the ephemeral range: Linux's own setting, else its default. */
function ephemeralStart(): number {
  try {
    const first = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    if (Number.isInteger(first) && first > LOWEST_PORT) return first;
  } catch {
    // Not Linux: its default below.
  }
  return 32_768;
}

/** True when `port` on 127.0.0.1 can be bound now (it is bound and closed again). */
async function bindable(port: number): Promise<boolean> {
  const srv = createServer();
  const bound = await new Promise<boolean>((resolve) => {
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => resolve(true));
  });
  if (bound) await new Promise<void>((resolve) => srv.close(() => resolve()));
  return bound;
}

function ping(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = createConnection({ host: '127.0.0.1', port });
    let data = '';
    const done = (ok: boolean): void => {
      sock.destroy();
      resolve(ok);
    };
    sock.setTimeout(500, () => done(false));
    sock.on('error', () => done(false));
    sock.on('connect', () => sock.write('PING\r\n'));
    sock.on('data', (d) => {
      data += d.toString();
      if (data.includes('\r\n')) done(data.startsWith('+PONG'));
    });
  });
}

/** Starts a server on `opts.port` (default: a free one), with `opts.args` appended to the command line. */
export async function startRedisServer(opts: { port?: number; args?: readonly string[] } = {}): Promise<RedisServer> {
  const port = opts.port ?? (await freePort());
  const extra = opts.args ?? [];
  const dir = mkdtempSync(join(tmpdir(), 'sandgate-redis-'));
  let proc: ChildProcess | undefined;
  const admins: Redis[] = [];

  const launch = async (): Promise<void> => {
    const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, ...extra], { stdio: 'ignore' });
    proc = child;
    // A program that is not installed is an 'error' event (ENOENT), not an exit.
    let spawnError: Error | undefined;
    child.on('error', (err) => (spawnError = err));
    await eventually(
      async () => {
        if (spawnError !== undefined) throw new Error(`redis-server did not start: ${spawnError.message}`);
        if (child.exitCode !== null) throw new Error(`redis-server exited with ${child.exitCode}`);
        return ping(port);
      },
      10_000,
      `redis-server on port ${port} to answer PING`,
    );
  };

  const end = async (signal: NodeJS.Signals): Promise<void> => {
    for (const a of admins.splice(0)) a.disconnect();
    const child = proc;
    proc = undefined;
    if (child?.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    if (signal === 'SIGTERM') child.kill('SIGCONT');
    child.kill(signal);
    await exited;
  };

  await launch().catch((err: unknown) => {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  });
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    stop: async () => {
      await end('SIGTERM');
      rmSync(dir, { recursive: true, force: true });
    },
    kill: () => end('SIGKILL'),
    restart: async () => {
      await end('SIGTERM');
      await launch();
    },
    pause: () => {
      proc?.kill('SIGSTOP');
    },
    resume: () => {
      proc?.kill('SIGCONT');
    },
    admin: () => {
      const a = new Redis(port, '127.0.0.1', { maxRetriesPerRequest: 1 });
      a.on('error', () => undefined);
      admins.push(a);
      return a;
    },
  };
}

/**
 * A TCP relay in front of a server, to partition one client from Redis while others still reach it.
 * `freeze()` stops forwarding with every socket left open (what a paused or partitioned host looks like
 * from both ends: commands hang, then arrive late after `thaw()`); `cut()` drops every connection and
 * refuses new ones until `heal()`.
 */
export interface TcpRelay {
  readonly port: number;
  readonly url: string;
  freeze(): void;
  thaw(): void;
  cut(): void;
  heal(): void;
  close(): Promise<void>;
}

export async function startTcpRelay(targetPort: number): Promise<TcpRelay> {
  const sockets = new Set<Socket>();
  let open = true;
  let frozen = false;
  // Bytes held while frozen, per destination, delivered in order on thaw.
  const held = new Map<Socket, Buffer[]>();
  const forward = (from: Socket, to: Socket): void => {
    from.on('data', (chunk: Buffer) => {
      if (!frozen) {
        to.write(chunk);
        return;
      }
      const q = held.get(to) ?? [];
      q.push(chunk);
      held.set(to, q);
    });
  };
  const server: Server = createServer((client) => {
    if (!open) {
      client.destroy();
      return;
    }
    const upstream = createConnection({ host: '127.0.0.1', port: targetPort });
    sockets.add(client);
    sockets.add(upstream);
    const drop = (): void => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('error', drop);
    upstream.on('error', drop);
    client.on('close', drop);
    upstream.on('close', drop);
    forward(client, upstream);
    forward(upstream, client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('no port');
  const cutAll = (): void => {
    for (const s of sockets) s.destroy();
    sockets.clear();
  };
  return {
    port: address.port,
    url: `redis://127.0.0.1:${address.port}`,
    freeze: () => {
      frozen = true;
    },
    thaw: () => {
      frozen = false;
      for (const [to, chunks] of held) if (!to.destroyed) for (const c of chunks) to.write(c);
      held.clear();
    },
    cut: () => {
      open = false;
      cutAll();
    },
    heal: () => {
      open = true;
    },
    close: async () => {
      cutAll();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

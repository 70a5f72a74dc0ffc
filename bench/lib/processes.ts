import { fork, spawn, type ChildProcess } from 'node:child_process';
import { createConnection, createServer } from 'node:net';
import { createInterface } from 'node:readline';
import type { IpcReply } from './ipc.js';

// Every child of the run is SIGKILLed if the runner itself exits, so a failed run leaves nothing listening.
const LIVE = new Set<ChildProcess>();
process.on('exit', () => {
  for (const c of LIVE) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
});

const TAIL_LINES = 40;

export class Child {
  readonly tail: string[] = [];
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private readonly readyInfo: Promise<Record<string, unknown>>;
  /** ENOENT: the program is not installed. */
  private spawnError: Error | undefined;

  constructor(
    readonly name: string,
    readonly proc: ChildProcess,
  ) {
    LIVE.add(proc);
    proc.on('error', (err) => {
      if (proc.pid === undefined) this.spawnError = err;
      this.tail.push(`${name}: ${err.message}`);
    });
    this.exited = new Promise((resolve) => {
      proc.once('exit', (code, signal) => {
        LIVE.delete(proc);
        for (const p of this.pending.values()) p.reject(new Error(`${name} exited (${signal ?? code}) before answering:\n${this.tailText()}`));
        this.pending.clear();
        resolve({ code, signal });
      });
    });
    for (const input of [proc.stdout, proc.stderr]) {
      if (input === null) continue;
      createInterface({ input }).on('line', (line) => {
        this.tail.push(line);
        if (this.tail.length > TAIL_LINES) this.tail.shift();
      });
    }
    this.readyInfo = new Promise((resolve, reject) => {
      proc.on('message', (m: unknown) => {
        const msg = m as { ready?: Record<string, unknown> } & Partial<IpcReply>;
        if (msg.ready !== undefined) return resolve(msg.ready);
        if (typeof msg.id !== 'number') return;
        const p = this.pending.get(msg.id);
        if (p === undefined) return;
        this.pending.delete(msg.id);
        if (msg.ok) p.resolve(msg.value);
        else p.reject(new Error(`${name}: ${msg.error}`));
      });
      void this.exited.then(({ code, signal }) => reject(new Error(`${name} exited (${signal ?? code}) before it was ready:\n${this.tailText()}`)));
    });
    this.readyInfo.catch(() => {});
  }

  get running(): boolean {
    return this.spawnError === undefined && this.proc.exitCode === null && this.proc.signalCode === null;
  }

  tailText(): string {
    return this.tail.join('\n');
  }

  ready(): Promise<Record<string, unknown>> {
    return withTimeout(this.readyInfo, 60_000, `${this.name} was not ready within 60 s`);
  }

  request<T>(op: string, args: unknown = {}, timeoutMs = 600_000): Promise<T> {
    if (!this.running || this.proc.send === undefined) return Promise.reject(new Error(`${this.name} is not running`));
    const id = this.nextId++;
    const p = new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.proc.send!({ id, op, args });
    });
    return withTimeout(p, timeoutMs, `${this.name}: ${op} took more than ${timeoutMs} ms`);
  }

  async stop(signal: NodeJS.Signals = 'SIGTERM', graceMs = 10_000): Promise<void> {
    if (!this.running) return;
    this.proc.kill(signal);
    const timer = setTimeout(() => this.proc.kill('SIGKILL'), graceMs);
    await this.exited;
    clearTimeout(timer);
  }
}

function withTimeout<T>(p: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const t = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(message)), ms);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

/** The children one section started, stopped when it ends whatever happened. */
export class ProcessGroup {
  private readonly children: Child[] = [];

  /** `env` is the child's whole environment. */
  node(name: string, script: string, args: readonly string[] = [], opts: { execArgv?: readonly string[]; env?: NodeJS.ProcessEnv } = {}): Child {
    const proc = fork(script, [...args], { execArgv: [...(opts.execArgv ?? [])], env: opts.env ?? process.env, stdio: ['ignore', 'pipe', 'pipe', 'ipc'] });
    return this.adopt(new Child(name, proc));
  }

  program(name: string, command: string, args: readonly string[]): Child {
    return this.adopt(new Child(name, spawn(command, [...args], { stdio: ['ignore', 'pipe', 'pipe'] })));
  }

  private adopt(c: Child): Child {
    this.children.push(c);
    return c;
  }

  async stopAll(): Promise<void> {
    for (const c of this.children.reverse()) await c.stop();
    this.children.length = 0;
  }
}

/** Bound and released: another process could take it in between, which on a quiet loopback does not happen. */
export async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((resolve, reject) => {
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', resolve);
  });
  const address = srv.address();
  await new Promise<void>((resolve) => srv.close(() => resolve()));
  if (address === null || typeof address === 'string') throw new Error('no free port');
  return address.port;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export function answers(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = createConnection({ host: '127.0.0.1', port });
    const done = (result: boolean): void => {
      sock.destroy();
      resolve(result);
    };
    sock.setTimeout(500, () => done(false));
    sock.on('error', () => done(false));
    sock.on('connect', () => done(true));
  });
}

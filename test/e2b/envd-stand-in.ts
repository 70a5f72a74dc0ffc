import { spawn } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { readFileSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createRequire } from 'node:module';
import { Readable } from 'node:stream';
import { create, type DescMessage, type DescService } from '@bufbuild/protobuf';
import { fileDesc } from '@bufbuild/protobuf/codegenv2';
import { Code, ConnectError, type ConnectRouter, type HandlerContext } from '@connectrpc/connect';
import { connectNodeAdapter } from '@connectrpc/connect-node';

/**
 * A stand-in for E2B's in-sandbox daemon (envd), real enough for the E2B SDK: a Connect server for
 * envd's `process.Process` service (commands run as real `/bin/bash` processes, their output streamed as
 * it comes, keepalive events at the interval the client asks for in `Keepalive-Ping-Interval`; pty
 * sessions fed by SendInput), plus
 * envd's HTTP routes `GET /health`, `GET /files` and `POST /files`. Like envd it refuses every call but
 * `/health` without the right `X-Access-Token`.
 *
 * The service comes from the very descriptor the SDK was generated with: the SDK bundles envd's
 * protobuf-es descriptors (serialized FileDescriptorProtos passed to `fileDesc`) without exporting them,
 * so we read `process/process.proto`'s out of its bundle. No wire format is written by hand here.
 */

/** base64 of the descriptor's first bytes: field 1 (name) = "process/process.proto". */
const PROCESS_PROTO_PREFIX = 'ChVwcm9jZXNzL3Byb2Nlc3MucHJvdG8';

let processService: DescService | undefined;

export function envdProcessService(): DescService {
  if (processService !== undefined) return processService;
  const bundle = readFileSync(createRequire(import.meta.url).resolve('e2b'), 'utf8');
  const m = new RegExp(`fileDesc\\)?\\("(${PROCESS_PROTO_PREFIX}[A-Za-z0-9+/=]*)"`).exec(bundle);
  if (m === null) throw new Error('the e2b package no longer bundles envd process/process.proto');
  const svc = fileDesc(m[1]!).services.find((s) => s.typeName === 'process.Process');
  if (svc === undefined) throw new Error('process/process.proto has no process.Process service');
  return (processService = svc);
}

export interface EnvdStandIn {
  readonly port: number;
  /** Files written through `/files`, by path. */
  readonly files: Map<string, Buffer>;
  /** Emits `headers` (path, headers) for every request, `keepalive` (pid), `aborted` (pid), `exited` (pid, code). */
  readonly events: EventEmitter;
  keepalives: number;
  close(): Promise<void>;
}

type Event = { case: 'start'; value: { pid: number } } | { case: 'data'; value: { output: { case: 'stdout' | 'stderr' | 'pty'; value: Uint8Array } } } | { case: 'end'; value: { exitCode: number; exited: boolean; status: string } } | { case: 'keepalive'; value: object };

/** A push queue an async generator drains: producers push, `close()` ends the stream. */
class Queue<T> {
  private items: T[] = [];
  private wake: (() => void) | undefined;
  private done = false;
  push(v: T): void {
    this.items.push(v);
    this.wake?.();
  }
  close(): void {
    this.done = true;
    this.wake?.();
  }
  async *drain(): AsyncGenerator<T> {
    for (;;) {
      while (this.items.length > 0) yield this.items.shift()!;
      if (this.done) return;
      await new Promise<void>((r) => (this.wake = r));
      this.wake = undefined;
    }
  }
}

function json(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
}

/** Starts the stand-in on `host:port` (envd's port 49983 on a loopback address of the test's own). */
export async function startEnvd(host: string, port: number, accessToken: string): Promise<EnvdStandIn> {
  const svc = envdProcessService();
  const files = new Map<string, Buffer>();
  const events = new EventEmitter();
  const processes = new Map<number, ReturnType<typeof spawn>>();
  const state = { keepalives: 0 };

  const authorize = (ctx: HandlerContext): void => {
    if (ctx.requestHeader.get('x-access-token') !== accessToken) throw new ConnectError('invalid access token', Code.Unauthenticated);
  };
  const method = (name: string) => svc.methods.find((m) => m.localName === name)!;
  const startOutput: DescMessage = method('start').output;

  const routes = (router: ConnectRouter): void => {
    router.service(svc, {
      async *start(req: any, ctx: HandlerContext) {
        authorize(ctx);
        // A pty session gets its input from SendInput and its output as `pty` data. The stand-in has no
        // terminal to give it (bash runs on pipes), which is all the SDK's stream handling can tell apart.
        const pty = req.pty !== undefined;
        const child = spawn(req.process.cmd, req.process.args, { cwd: req.process.cwd || undefined, env: { ...process.env, ...req.process.envs }, stdio: [pty ? 'pipe' : 'ignore', 'pipe', 'pipe'] });
        const pid = child.pid!;
        processes.set(pid, child);
        const q = new Queue<Event>();
        q.push({ case: 'start', value: { pid } });
        child.stdout!.on('data', (b: Buffer) => q.push({ case: 'data', value: { output: { case: pty ? 'pty' : 'stdout', value: b } } }));
        child.stderr!.on('data', (b: Buffer) => q.push({ case: 'data', value: { output: { case: pty ? 'pty' : 'stderr', value: b } } }));
        child.on('close', (code, signal) => {
          processes.delete(pid);
          events.emit('exited', pid, code ?? -1);
          q.push({ case: 'end', value: { exitCode: code ?? -1, exited: code !== null, status: signal ? `signal: ${signal}` : `exit status ${code}` } });
          q.close();
        });
        // envd's keepalive: an empty event every `Keepalive-Ping-Interval` seconds, so idle streams stay open.
        const seconds = Number(ctx.requestHeader.get('keepalive-ping-interval') ?? '0');
        const ping = seconds > 0 ? setInterval(() => {
          state.keepalives++;
          events.emit('keepalive', pid);
          q.push({ case: 'keepalive', value: {} });
        }, seconds * 1000) : undefined;
        const onAbort = (): void => {
          events.emit('aborted', pid);
          child.kill('SIGKILL');
        };
        ctx.signal.addEventListener('abort', onAbort, { once: true });
        try {
          for await (const event of q.drain()) yield create(startOutput, { event: { event: event } } as never);
        } finally {
          clearInterval(ping);
          ctx.signal.removeEventListener('abort', onAbort);
        }
      },
      async sendInput(req: any, ctx: HandlerContext) {
        authorize(ctx);
        const child = processes.get(req.process?.selector?.value);
        if (child?.stdin == null) throw new ConnectError('process not found', Code.NotFound);
        child.stdin.write(Buffer.from(req.input.input.value));
        return create(method('sendInput').output);
      },
      async sendSignal(req: any, ctx: HandlerContext) {
        authorize(ctx);
        const child = processes.get(req.process?.selector?.value);
        if (child === undefined) throw new ConnectError('process not found', Code.NotFound);
        child.kill('SIGKILL');
        return create(method('sendSignal').output);
      },
    } as never);
  };
  const connect = connectNodeAdapter({ routes });

  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://envd');
    events.emit('headers', url.pathname, req.headers);
    if (url.pathname === '/health') {
      res.writeHead(204).end();
      return;
    }
    if (url.pathname === '/files') {
      if (req.headers['x-access-token'] !== accessToken) return json(res, 401, { code: 401, message: 'invalid access token' });
      void serveFiles(req, res, url, files).catch((err: unknown) => json(res, 500, { code: 500, message: String(err) }));
      return;
    }
    connect(req, res);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  return {
    port,
    files,
    events,
    get keepalives() {
      return state.keepalives;
    },
    set keepalives(n: number) {
      state.keepalives = n;
    },
    close: () =>
      new Promise<void>((r) => {
        for (const p of processes.values()) p.kill('SIGKILL');
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

async function serveFiles(req: IncomingMessage, res: ServerResponse, url: URL, files: Map<string, Buffer>): Promise<void> {
  const path = url.searchParams.get('path') ?? '';
  if (req.method === 'GET') {
    const data = files.get(path);
    if (data === undefined) return json(res, 404, { code: 404, message: `path '${path}' does not exist` });
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': data.length }).end(data);
    return;
  }
  if (req.method !== 'POST') return json(res, 405, { code: 405, message: 'method not allowed' });
  const written: { name: string; type: string; path: string }[] = [];
  if ((req.headers['content-type'] ?? '').startsWith('multipart/form-data')) {
    // The platform's own multipart parser (undici's Request.formData), not a hand-written one.
    const form = await new Request('http://envd/files', { method: 'POST', headers: headersOf(req.headers), body: Readable.toWeb(req) as ReadableStream, duplex: 'half' } as RequestInit).formData();
    for (const [, value] of form.entries()) {
      if (typeof value === 'string') continue;
      const p = path !== '' ? path : value.name;
      files.set(p, Buffer.from(await value.arrayBuffer()));
      written.push({ name: p.split('/').pop()!, type: 'file', path: p });
    }
  } else {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    files.set(path, Buffer.concat(chunks));
    written.push({ name: path.split('/').pop()!, type: 'file', path });
  }
  json(res, 200, written);
}

function headersOf(h: IncomingHttpHeaders): Headers {
  const out = new Headers();
  for (const [k, v] of Object.entries(h)) if (typeof v === 'string') out.set(k, v);
  return out;
}

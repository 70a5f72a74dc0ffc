import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { join } from 'node:path';
import { ProcessTreeTarget } from './proc-cpu.js';
import { freePort, sleep, type ProcessGroup } from './processes.js';

/**
 * nginx as the proxy a team would put in front of sandboxes without Envoy: found on the PATH, or, with
 * `--install-missing` only, installed from the Debian package by the bench itself (bounded in time), then run in the foreground with
 * a generated config in a private prefix, and stopped with its section.
 */

export type NginxFound = { readonly bin: string; readonly authRequest: boolean } | { readonly skipped: string };

const INSTALL_TIMEOUT_MS = 300_000;
const UPDATE_TIMEOUT_MS = 180_000;

interface Ran {
  readonly ok: boolean;
  readonly output: string;
}

function run(cmd: string, args: readonly string[], timeoutMs: number, env: NodeJS.ProcessEnv = process.env): Promise<Ran> {
  return new Promise((resolve) => {
    execFile(cmd, [...args], { timeout: timeoutMs, env, maxBuffer: 16 * 1024 * 1024, encoding: 'utf8' }, (err, stdout, stderr) => {
      const output = `${stdout}${stderr}`.trim();
      if (err === null) return resolve({ ok: true, output });
      const why = (err as { killed?: boolean }).killed === true ? `timed out after ${timeoutMs / 1000} s` : err.message.split('\n')[0]!;
      resolve({ ok: false, output: `${why}\n${output}` });
    });
  });
}

function lastLine(text: string): string {
  return text.split('\n').filter((l) => l.trim() !== '').at(-1)?.trim() ?? 'no output';
}

async function locate(): Promise<string | undefined> {
  const found = await run('sh', ['-c', 'command -v nginx'], 5_000);
  if (found.ok && found.output !== '') return found.output.split('\n')[0];
  // A non-login shell of a non-root user may lack /usr/sbin on its PATH.
  return ['/usr/sbin/nginx', '/usr/local/sbin/nginx', '/usr/local/nginx/sbin/nginx'].find((p) => existsSync(p));
}

/** `apt-get install nginx`, with one `apt-get update` when the package lists are missing or stale. */
async function install(log: (m: string) => void): Promise<string | undefined> {
  if (process.platform !== 'linux') return 'nginx is not installed (and the bench installs it only on Debian-like Linux)';
  if (process.getuid?.() !== 0) return 'nginx is not installed, and installing it needs root';
  if ((await run('sh', ['-c', 'command -v apt-get'], 5_000)).output === '') return 'nginx is not installed and there is no apt-get to install it';
  // Non-interactive, no recommended extras; a policy-rc.d (as in containers) keeps the package from
  // starting a system nginx, and the bench never uses one: it runs its own in the foreground.
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  const args = ['install', '-y', '--no-install-recommends', 'nginx'];
  log('proxy: nginx not found, installing the Debian package (apt-get install -y nginx)');
  let r = await run('apt-get', args, INSTALL_TIMEOUT_MS, env);
  if (!r.ok) {
    log(`proxy: apt-get install failed (${lastLine(r.output)}); apt-get update, then again`);
    const u = await run('apt-get', ['update'], UPDATE_TIMEOUT_MS, env);
    if (!u.ok) return `nginx is not installed and apt-get update failed: ${lastLine(u.output)}`;
    r = await run('apt-get', args, INSTALL_TIMEOUT_MS, env);
  }
  return r.ok ? undefined : `nginx is not installed and apt-get install nginx failed: ${lastLine(r.output)}`;
}

/** Finds nginx, installing it when missing; `skipped` says why there is none. */
export async function findNginx(log: (m: string) => void, installMissing: boolean): Promise<NginxFound> {
  let bin = await locate();
  if (bin === undefined) {
    // Installing a system package is the operator's call, never a side effect of a benchmark run.
    if (!installMissing) return { skipped: 'nginx is not installed (run with --install-missing to let the bench apt-get install it)' };
    const failed = await install(log);
    if (failed !== undefined) return { skipped: failed };
    bin = await locate();
    if (bin === undefined) return { skipped: 'apt-get install nginx succeeded but no nginx binary was found' };
  }
  // `nginx -V` prints its build options (on stderr), among them the optional modules compiled in.
  const v = await run(bin, ['-V'], 10_000);
  if (!v.ok) return { skipped: `${bin} -V failed: ${lastLine(v.output)}` };
  return { bin, authRequest: v.output.includes('http_auth_request_module') };
}

export interface NginxPorts {
  /** `proxy_pass` straight to the upstream. */
  readonly proxyPass: number;
  /** `auth_request` to sandgate's HTTP authz, then `proxy_pass http://$upstream` as a team would write it. */
  readonly authRequest: number;
  /** The same, with the answered address mapped onto a pooled `upstream` block (nginx at its best). */
  readonly authRequestPooled: number;
}

export interface NginxSpec {
  /** `127.0.0.1:<port>` of the sandbox upstream. */
  readonly upstream: string;
  /** sandgate's admin port (HTTP authz under /authz/). */
  readonly adminPort: number;
  readonly authRequest: boolean;
}

const KEEPALIVE_UPSTREAM = ['proxy_http_version 1.1;', 'proxy_set_header Connection "";'];

function pool(name: string, server: string): string[] {
  return [`  upstream ${name} {`, `    server ${server};`, '    keepalive 256;', '    keepalive_requests 1000000;', '    keepalive_timeout 60s;', '  }'];
}

/** A server that asks sandgate's HTTP authz (`auth_request`) and sends the request to `target`. */
function authServer(port: number, target: string): string[] {
  return [
    '  server {',
    `    listen 127.0.0.1:${port};`,
    '    location / {',
    '      auth_request /_authz;',
    '      auth_request_set $sandgate_upstream $upstream_http_x_sandgate_upstream;',
    `      proxy_pass http://${target};`,
    ...KEEPALIVE_UPSTREAM.map((l) => '      ' + l),
    '    }',
    '    location = /_authz {',
    '      internal;',
    '      proxy_pass http://sandgate_authz/authz;',
    '      proxy_pass_request_body off;',
    '      proxy_set_header Content-Length "";',
    '      proxy_set_header X-Original-URI $request_uri;',
    '      proxy_set_header Host $host;',
    ...KEEPALIVE_UPSTREAM.map((l) => '      ' + l),
    '    }',
    '  }',
  ];
}

/**
 * The generated config. One nginx process serves every door (`master_process off`: the process that
 * would be the single worker of `worker_processes 1` does the work itself, and a SIGKILL of it leaves no
 * orphaned worker listening). Clients keep their connections for the whole window (`keepalive_requests`);
 * sandgate's authz and the proxy_pass upstream come from `upstream` blocks with `keepalive` over HTTP/1.1.
 *
 * auth_request: sandgate answers 200 with `x-sandgate-upstream: ip:port`, and nginx sends the request
 * there with `proxy_pass http://$sandgate_upstream`. A `proxy_pass` to an address held in a variable gets
 * no keep-alive pool in open-source nginx: every request opens a connection to the sandbox, as it would
 * in a deployment with many sandbox addresses. The pooled door maps the bench's one upstream address onto
 * the name of a pooled `upstream` block, which a real deployment could not do: nginx at its best.
 */
export function nginxConfig(prefix: string, spec: NginxSpec, ports: NginxPorts): string {
  const lines = [
    'master_process off;',
    'worker_processes 1;',
    'daemon off;',
    `pid ${join(prefix, 'nginx.pid')};`,
    `error_log ${join(prefix, 'error.log')} warn;`,
    'events { worker_connections 4096; }',
    'http {',
    '  access_log off;',
    '  keepalive_requests 1000000;',
    '  keepalive_timeout 65s;',
    ...['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map((k) => `  ${k}_temp_path ${join(prefix, 'tmp', k)};`),
    ...pool('sandbox_upstream', spec.upstream),
    ...pool('sandgate_authz', `127.0.0.1:${spec.adminPort}`),
    '  server {',
    `    listen 127.0.0.1:${ports.proxyPass};`,
    '    location / {',
    '      proxy_pass http://sandbox_upstream;',
    ...KEEPALIVE_UPSTREAM.map((l) => '      ' + l),
    '    }',
    '  }',
  ];
  if (spec.authRequest) {
    lines.push(
      '  map $sandgate_upstream $sandbox_pool {',
      `    "${spec.upstream}" sandbox_upstream;`,
      '    default $sandgate_upstream;',
      '  }',
      ...authServer(ports.authRequest, '$sandgate_upstream'),
      ...authServer(ports.authRequestPooled, '$sandbox_pool'),
    );
  }
  lines.push('}', '');
  return lines.join('\n');
}

function accepts(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = createConnection({ host: '127.0.0.1', port });
    const done = (ok: boolean): void => {
      sock.destroy();
      resolve(ok);
    };
    sock.setTimeout(500, () => done(false));
    sock.on('error', () => done(false));
    sock.on('connect', () => done(true));
  });
}

export interface RunningNginx {
  readonly target: ProcessTreeTarget;
  readonly ports: NginxPorts;
  readonly configPath: string;
}

/**
 * Starts nginx in the foreground with its prefix (config, logs, temp files) in a new folder under `dir`;
 * the group stops it with SIGTERM, nginx's fast shutdown.
 */
export async function startNginx(group: ProcessGroup, dir: string, bin: string, spec: NginxSpec): Promise<RunningNginx> {
  const prefix = mkdtempSync(join(dir, 'nginx-'));
  for (const k of ['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']) mkdirSync(join(prefix, 'tmp', k), { recursive: true });
  const ports: NginxPorts = { proxyPass: await freePort(), authRequest: await freePort(), authRequestPooled: await freePort() };
  const configPath = join(prefix, 'nginx.conf');
  writeFileSync(configPath, nginxConfig(prefix, spec, ports));
  // -e: the error log before the config is read (the default path may not be writable).
  const child = group.program('nginx', bin, ['-p', prefix, '-c', configPath, '-e', join(prefix, 'error.log')]);
  const deadline = Date.now() + 10_000;
  const wanted = spec.authRequest ? [ports.proxyPass, ports.authRequest, ports.authRequestPooled] : [ports.proxyPass];
  for (;;) {
    if (!child.running) throw new Error(`nginx did not start: ${child.tailText() || 'it exited'}`);
    if ((await Promise.all(wanted.map(accepts))).every(Boolean)) break;
    if (Date.now() > deadline) {
      await child.stop('SIGKILL');
      throw new Error(`nginx did not listen within 10 s: ${child.tailText()}`);
    }
    await sleep(50);
  }
  return { target: new ProcessTreeTarget(child, { main: ports.proxyPass }), ports, configPath };
}

import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ProcessTreeTarget } from './proc-cpu.js';
import { answers, freePort, sleep, type ProcessGroup } from './processes.js';

function run(cmd: string, args: readonly string[]): string | undefined {
  const r = spawnSync(cmd, args, { timeout: 10_000, encoding: 'utf8' });
  return r.status === 0 ? r.stdout + r.stderr : undefined;
}

/** nginx with every one of `modules` (as `nginx -V` names them), or why there is none. */
export function findNginx(modules: readonly string[]): { readonly bin: string } | { readonly skipped: string } {
  const onPath = run('sh', ['-c', 'command -v nginx'])?.trim();
  // A non-login shell of a non-root user may lack /usr/sbin on its PATH.
  const bin = onPath !== undefined && onPath !== '' ? onPath : ['/usr/sbin/nginx', '/usr/local/sbin/nginx'].find((p) => existsSync(p));
  if (bin === undefined) return { skipped: 'nginx is not installed' };
  // `nginx -V` prints its build options (on stderr), among them the optional modules compiled in.
  const v = run(bin, ['-V']);
  if (v === undefined) return { skipped: `${bin} -V failed` };
  const missing = modules.filter((m) => !v.includes(m));
  return missing.length > 0 ? { skipped: `${bin} was built without ${missing.join(', ')}` } : { bin };
}

const KEEPALIVE = ['  proxy_http_version 1.1;', '  proxy_set_header Connection "";'];

/**
 * nginx as a team would put it in front of sandboxes without Envoy. An address held in a variable gets no
 * keep-alive pool in open-source nginx, so every request opens a connection to the sandbox, as it would with many.
 */
export function authRequestServer(adminPort: number): NginxServer {
  return {
    upstreams: [`upstream sandgate_authz { server 127.0.0.1:${adminPort}; keepalive 256; keepalive_requests 1000000; keepalive_timeout 60s; }`],
    server: [
      'location / {',
      '  auth_request /_authz;',
      '  auth_request_set $sandgate_upstream $upstream_http_x_sandgate_upstream;',
      '  proxy_pass http://$sandgate_upstream;',
      ...KEEPALIVE,
      '}',
      'location = /_authz {',
      '  internal;',
      '  proxy_pass http://sandgate_authz/authz;',
      '  proxy_pass_request_body off;',
      '  proxy_set_header Content-Length "";',
      '  proxy_set_header X-Original-URI $request_uri;',
      '  proxy_set_header Host $host;',
      ...KEEPALIVE,
      '}',
    ],
  };
}

export function tlsProxyServer(certFile: string, keyFile: string, upstreamPort: number): NginxServer {
  return {
    listen: 'ssl http2',
    upstreams: [`upstream sandbox { server 127.0.0.1:${upstreamPort}; keepalive 256; keepalive_requests 1000000; keepalive_timeout 60s; }`],
    server: [`ssl_certificate ${certFile};`, `ssl_certificate_key ${keyFile};`, 'ssl_protocols TLSv1.2 TLSv1.3;', 'location / {', '  proxy_pass http://sandbox;', ...KEEPALIVE, '}'],
  };
}

interface NginxServer {
  readonly listen?: string;
  readonly upstreams: readonly string[];
  readonly server: readonly string[];
}

const TEMPS = ['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'];

/** `master_process off`: a SIGKILL leaves no orphaned worker. */
export async function startNginx(group: ProcessGroup, dir: string, bin: string, spec: NginxServer): Promise<ProcessTreeTarget> {
  const prefix = mkdtempSync(join(dir, 'nginx-'));
  for (const k of TEMPS) mkdirSync(join(prefix, 'tmp', k), { recursive: true });
  const port = await freePort();
  const configPath = join(prefix, 'nginx.conf');
  const config = [
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
    ...TEMPS.map((k) => `  ${k}_temp_path ${join(prefix, 'tmp', k)};`),
    ...spec.upstreams.map((u) => '  ' + u),
    `  server {`,
    `    listen 127.0.0.1:${port}${spec.listen === undefined ? '' : ' ' + spec.listen};`,
    ...spec.server.map((l) => '    ' + l),
    '  }',
    '}',
    '',
  ];
  writeFileSync(configPath, config.join('\n'));
  // -e: the error log before the config is read (the default path may not be writable).
  const child = group.program('nginx', bin, ['-p', prefix, '-c', configPath, '-e', join(prefix, 'error.log')]);
  const deadline = Date.now() + 10_000;
  while (!(await answers(port))) {
    if (!child.running || Date.now() > deadline) {
      await child.stop('SIGKILL');
      throw new Error(`nginx did not listen within 10 s: ${child.tailText() || 'it exited'}`);
    }
    await sleep(50);
  }
  return new ProcessTreeTarget(child, { main: port });
}

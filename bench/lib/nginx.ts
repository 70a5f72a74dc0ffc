import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { ProcessTreeTarget } from './proc-cpu.js';
import { answers, freePort, sleep, type ProcessGroup } from './processes.js';

/**
 * nginx as the proxy a team would put in front of sandboxes without Envoy: `auth_request` to sandgate's
 * HTTP authz, then `proxy_pass` to the address it answers. Found on the PATH (the bench installs nothing),
 * run in the foreground with a generated config in a private prefix, and stopped with its section.
 */

export type NginxFound = { readonly bin: string } | { readonly skipped: string };

function run(cmd: string, args: readonly string[]): Promise<string | undefined> {
  return new Promise((resolve) => {
    execFile(cmd, [...args], { timeout: 10_000, encoding: 'utf8' }, (err, stdout, stderr) => resolve(err === null ? `${stdout}${stderr}` : undefined));
  });
}

/** nginx with the auth_request module, or why there is none. */
export async function findNginx(): Promise<NginxFound> {
  const onPath = (await run('sh', ['-c', 'command -v nginx']))?.trim();
  // A non-login shell of a non-root user may lack /usr/sbin on its PATH.
  const bin = onPath !== undefined && onPath !== '' ? onPath : ['/usr/sbin/nginx', '/usr/local/sbin/nginx'].find((p) => existsSync(p));
  if (bin === undefined) return { skipped: 'nginx is not installed' };
  // `nginx -V` prints its build options (on stderr), among them the optional modules compiled in.
  const v = await run(bin, ['-V']);
  if (v === undefined) return { skipped: `${bin} -V failed` };
  if (!v.includes('http_auth_request_module')) return { skipped: `${bin} was built without http_auth_request_module` };
  return { bin };
}

export interface NginxSpec {
  /** sandgate's admin port (HTTP authz under /authz/). */
  readonly adminPort: number;
}

/**
 * One nginx process serves (`master_process off`: the process that would be the single worker does the
 * work itself, and a SIGKILL of it leaves no orphaned worker listening). Clients keep their connections
 * for the whole window; sandgate's authz comes from an `upstream` block with `keepalive` over HTTP/1.1.
 * sandgate answers 200 with `x-sandgate-upstream: ip:port`, and nginx sends the request there with
 * `proxy_pass http://$sandgate_upstream`: an address held in a variable gets no keep-alive pool in
 * open-source nginx, so every request opens a connection to the sandbox, as it would with many sandboxes.
 */
export function nginxConfig(prefix: string, spec: NginxSpec, port: number): string {
  const keepalive = ['proxy_http_version 1.1;', 'proxy_set_header Connection "";'];
  return [
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
    `  upstream sandgate_authz { server 127.0.0.1:${spec.adminPort}; keepalive 256; keepalive_requests 1000000; keepalive_timeout 60s; }`,
    '  server {',
    `    listen 127.0.0.1:${port};`,
    '    location / {',
    '      auth_request /_authz;',
    '      auth_request_set $sandgate_upstream $upstream_http_x_sandgate_upstream;',
    '      proxy_pass http://$sandgate_upstream;',
    ...keepalive.map((l) => '      ' + l),
    '    }',
    '    location = /_authz {',
    '      internal;',
    '      proxy_pass http://sandgate_authz/authz;',
    '      proxy_pass_request_body off;',
    '      proxy_set_header Content-Length "";',
    '      proxy_set_header X-Original-URI $request_uri;',
    '      proxy_set_header Host $host;',
    ...keepalive.map((l) => '      ' + l),
    '    }',
    '  }',
    '}',
    '',
  ].join('\n');
}

/** Starts nginx in the foreground with its prefix (config, logs, temp files) in a new folder under `dir`. */
export async function startNginx(group: ProcessGroup, dir: string, bin: string, spec: NginxSpec): Promise<ProcessTreeTarget> {
  const prefix = mkdtempSync(join(dir, 'nginx-'));
  for (const k of ['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']) mkdirSync(join(prefix, 'tmp', k), { recursive: true });
  const port = await freePort();
  const configPath = join(prefix, 'nginx.conf');
  writeFileSync(configPath, nginxConfig(prefix, spec, port));
  // -e: the error log before the config is read (the default path may not be writable).
  const child = group.program('nginx', bin, ['-p', prefix, '-c', configPath, '-e', join(prefix, 'error.log')]);
  const deadline = Date.now() + 10_000;
  while (!(await answers(port))) {
    if (!child.running) throw new Error(`nginx did not start: ${child.tailText() || 'it exited'}`);
    if (Date.now() > deadline) {
      await child.stop('SIGKILL');
      throw new Error(`nginx did not listen within 10 s: ${child.tailText()}`);
    }
    await sleep(50);
  }
  return new ProcessTreeTarget(child, { main: port });
}

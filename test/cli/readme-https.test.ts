import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { freePort } from '../helpers/redis-server.js';
import { CURL_HTTP2, needsCurl, OPENSSL } from '../helpers/tls-certs.js';

/** README's "HTTPS and HTTP/2" block, run as written: its openssl line, its flags on `sandgate serve`, its curl. */

const ROOT = fileURLToPath(new URL('../..', import.meta.url));
const CLI = join(ROOT, 'dist', 'src', 'cli', 'main.js');
const run = promisify(execFile);

function readmeBlock(): string[] {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  const from = readme.indexOf('**HTTPS and HTTP/2:**');
  const block = /```sh\n([\s\S]*?)```/.exec(readme.slice(from))![1]!;
  return block.replace(/\\\n\s*/g, '').trim().split('\n');
}

describe.skipIf(!OPENSSL || !CURL_HTTP2)(needsCurl("README's HTTPS quick start"), () => {
  it('the three commands: a self-made certificate, the TLS port, a request over HTTP/2', async () => {
    const [openssl, start, curl] = readmeBlock();
    expect(start).toMatch(/^npm start -- /);
    const dir = mkdtempSync(join(tmpdir(), 'sandgate-readme-'));
    const tls = await freePort();
    const plain = await freePort();
    const flags = start!.slice('npm start -- '.length).replace('8443', String(tls)).split(' ');
    await run('sh', ['-c', openssl!], { cwd: dir });
    const proc = spawn(process.execPath, [CLI, 'serve', ...flags, '--proxy-port', String(plain), '--admin-port', '0', '--grpc-port', '0', '--supervisor-port', '0', '--relay-port', '0', '--listen-host', '127.0.0.1'], {
      cwd: dir,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    try {
      await new Promise<void>((resolve, reject) => {
        let out = '';
        proc.stdout.on('data', (d: Buffer) => {
          out += d.toString();
          if (out.includes('supervisor session accepted')) resolve();
        });
        proc.once('exit', (code) => reject(new Error(`sandgate exited with ${code}: ${out}`)));
      });
      const { stdout } = await run('sh', ['-c', `${curl!.replace(':8443', `:${tls}`)} -w ' %{http_version}'`], { cwd: dir });
      expect(stdout).toMatch(/"sandbox":"team-a\/web"[^]* 2$/);
    } finally {
      proc.kill('SIGTERM');
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

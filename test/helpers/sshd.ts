import { execFile, execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * A real OpenSSH server on loopback as a sandbox's TCP port, and the real client to reach it (Debian's
 * openssh-server and openssh-client, installed by .ci/run): generated host and user keys, no PAM, the
 * test's own authorized key, no pid file.
 */

export const SSHD = '/usr/sbin/sshd';
export const OPENSSH = existsSync(SSHD) && execFileOk('ssh', ['-V']) && execFileOk('ssh-keygen', ['-?'], true);

function execFileOk(cmd: string, args: string[], anyExit = false): boolean {
  try {
    execFileSync(cmd, args, { stdio: 'ignore' });
    return true;
  } catch (err) {
    return anyExit && (err as { code?: unknown }).code !== 'ENOENT';
  }
}

/** The test's name, saying it is skipped without OpenSSH. */
export function needsOpenssh(name: string): string {
  return OPENSSH ? name : `${name} (skipped: no OpenSSH client and server: apt-get install openssh-client openssh-server)`;
}

export interface Sshd {
  readonly port: number;
  readonly dir: string;
  /** The user's private key file for `ssh -i`. */
  readonly keyFile: string;
  close(): void;
}

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/** Starts sshd on a free loopback port; resolves once it listens. */
export async function startSshd(): Promise<Sshd> {
  const dir = mkdtempSync(join(tmpdir(), 'sandgate-sshd-'));
  execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', join(dir, 'host_key')]);
  execFileSync('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', join(dir, 'user_key')]);
  execFileSync('cp', [join(dir, 'user_key.pub'), join(dir, 'authorized_keys')]);
  // sshd's privilege separation directory (the package's service would create it).
  mkdirSync('/run/sshd', { recursive: true });
  const port = await freePort();
  const config = join(dir, 'sshd_config');
  writeFileSync(
    config,
    [
      `Port ${port}`,
      'ListenAddress 127.0.0.1',
      `HostKey ${join(dir, 'host_key')}`,
      `AuthorizedKeysFile ${join(dir, 'authorized_keys')}`,
      'PidFile none',
      'UsePAM no',
      'StrictModes no',
      'PermitRootLogin prohibit-password',
      'PasswordAuthentication no',
      'KbdInteractiveAuthentication no',
      'Subsystem sftp internal-sftp',
      '',
    ].join('\n'),
  );
  const child: ChildProcess = spawn(SSHD, ['-D', '-e', '-f', config], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  await new Promise<void>((resolve, reject) => {
    child.stderr!.on('data', (c: Buffer) => {
      log += c.toString();
      if (log.includes('Server listening on')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`sshd exited (${code}): ${log}`)));
  });
  return {
    port,
    dir,
    keyFile: join(dir, 'user_key'),
    close: () => {
      if (child.exitCode === null) child.kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** Runs the OpenSSH client (`ssh` or `scp`) with a ProxyCommand; resolves with its exit code and output. */
export function runOpenssh(cmd: 'ssh' | 'scp', keyFile: string, proxyCommand: string, args: readonly string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const common = ['-F', '/dev/null', '-o', 'StrictHostKeyChecking=no', '-o', 'UserKnownHostsFile=/dev/null', '-o', 'BatchMode=yes', '-o', 'LogLevel=ERROR', '-o', `ProxyCommand=${proxyCommand}`, '-i', keyFile];
  return new Promise((resolve) => {
    execFile(cmd, [...common, ...args], { timeout: 60_000 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof (err as { code?: unknown }).code === 'number' ? ((err as { code: number }).code) : -1;
      resolve({ code, stdout, stderr });
    });
  });
}

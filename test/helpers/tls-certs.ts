import { execFile, execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CertificateStore, type CertificateSet, type CertificateSource } from '../../src/lib/tls/certificate-store.js';

/**
 * Throwaway certificates for TLS tests, made by the openssl command line (node's crypto reads X.509 but
 * cannot issue it). Tests that need them skip with the reason in their name when openssl is missing.
 */

export const OPENSSL = spawnSync('openssl', ['version'], { stdio: 'ignore' }).status === 0;
export const CURL_HTTP2 = (() => {
  const r = spawnSync('curl', ['--version'], { encoding: 'utf8' });
  return r.status === 0 && /HTTP2/.test(r.stdout);
})();

/** `name`, or `name` with why it is skipped when openssl is missing. */
export function needsOpenssl(name: string): string {
  return OPENSSL ? name : `${name} (skipped: no openssl command line)`;
}

/** `name`, or `name` with why it is skipped when curl with HTTP/2 (or openssl) is missing. */
export function needsCurl(name: string): string {
  if (!OPENSSL) return needsOpenssl(name);
  return CURL_HTTP2 ? name : `${name} (skipped: no curl with HTTP/2)`;
}

export interface TestCa {
  readonly dir: string;
  readonly caFile: string;
  /** Issues a leaf for `names` (DNS SANs; the first is also its CN), written as `<file>.crt` + `<file>.key` in `outDir`. */
  /** `client`: a client certificate only; `both`: server and client (a gateway's doors pair, which peers present). */
  issue(file: string, names: readonly string[], opts?: { outDir?: string; client?: boolean; both?: boolean; cn?: string }): { certFile: string; keyFile: string; cert: Buffer; key: Buffer };
  remove(): void;
}

const EC = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

/** A private CA (P-256, two days) in a temp directory. */
export function makeCa(label = 'sandgate test CA'): TestCa {
  const dir = mkdtempSync(join(tmpdir(), 'sandgate-tls-'));
  const run = (args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  run(['req', '-x509', ...EC, '-keyout', 'ca.key', '-out', 'ca.crt', '-days', '2', '-subj', `/CN=${label}`]);
  let serial = 1;
  return {
    dir,
    caFile: join(dir, 'ca.crt'),
    issue(file, names, opts = {}) {
      const out = opts.outDir ?? dir;
      const keyFile = join(out, `${file}.key`);
      const certFile = join(out, `${file}.crt`);
      const csr = join(dir, `${file}-${serial}.csr`);
      const ext = join(dir, `${file}-${serial}.cnf`);
      run(['req', ...EC, '-keyout', keyFile, '-out', csr, '-subj', `/CN=${opts.cn ?? names[0] ?? file}`]);
      const san = names.length > 0 ? `subjectAltName=${names.map((n) => `DNS:${n}`).join(',')}\n` : '';
      writeFileSync(ext, `${san}basicConstraints=CA:FALSE\nextendedKeyUsage=${opts.both === true ? 'serverAuth,clientAuth' : opts.client === true ? 'clientAuth' : 'serverAuth'}\n`);
      run(['x509', '-req', '-in', csr, '-CA', 'ca.crt', '-CAkey', 'ca.key', '-set_serial', String(serial++), '-out', certFile, '-days', '2', '-extfile', ext]);
      return { certFile, keyFile, cert: readFileSync(certFile), key: readFileSync(keyFile) };
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

/** What `openssl s_client -servername <sni>` is served: the leaf's subject line, or undefined when the handshake failed. */
export function servedSubject(port: number, sni: string | undefined, extra: readonly string[] = []): Promise<string | undefined> {
  const args = ['s_client', '-connect', `127.0.0.1:${port}`, ...(sni === undefined ? ['-noservername'] : ['-servername', sni]), ...extra];
  return new Promise((resolve) => {
    // Not spawnSync: the server under test runs in this process's event loop.
    const child = execFile('openssl', args, { encoding: 'utf8', timeout: 10_000 }, (_err, stdout) => resolve(/^subject=(.*)$/m.exec(stdout)?.[1]?.trim()));
    child.stdin?.end();
  });
}

/** One pair (or directory of pairs) as a listener is handed it: a set of a store holding only it. */
export function certificatePairs(from: CertificateSource, opts: { clientCa?: Buffer } = {}): CertificateSet {
  return new CertificateStore({ pairs: { from, clientCa: opts.clientCa } }).set('pairs');
}

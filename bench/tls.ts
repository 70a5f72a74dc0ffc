import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Findings, formatDiff, httpPair, measureCost, type HttpSide, type Names } from './lib/compare.js';
import { NAMESPACES, sandboxNamespace, startUpstream } from './lib/sandboxes.js';
import { findNginx, startNginx, tlsProxyServer } from './lib/nginx.js';
import { target } from './lib/report.js';
import { blocks, type Section } from './lib/section.js';
import { startGateway } from './lib/targets.js';

/**
 * nginx terminating TLS on the same certificate is the baseline of the TLS port itself; a gateway without
 * TLS is the baseline of what TLS adds, and of the plain port beside a TLS one. Certificates: a throwaway
 * CA and a P-256 leaf for the sandbox hosts, by openssl.
 */

const SANDBOXES = 1000;
const RATE = 1500;
const OPEN = 16;
const PLAIN_TARGET = "a TLS port leaves the plain-HTTP proxy's CPU per request unchanged (0 within the spread of the difference)";
const H2_TARGET = 'HTTPS h2 costs no more CPU per request than HTTPS/1.1 (median difference ≤ 0)';

function makeCertificates(dir: string): { ca: Buffer; certFile: string; keyFile: string } {
  const d = mkdtempSync(join(dir, 'tls-'));
  const openssl = (args: string[]) => execFileSync('openssl', args, { cwd: d, stdio: 'pipe' });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  openssl(['req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.crt', '-days', '2', '-subj', '/CN=sandgate bench CA']);
  openssl(['req', ...ec, '-keyout', 'leaf.key', '-out', 'leaf.csr', '-subj', '/CN=localhost']);
  // The bench's sandbox hosts are `<port>-<name>.<namespace>.localhost`: a wildcard per namespace.
  const names = ['localhost', ...Array.from({ length: NAMESPACES }, (_, k) => `*.${sandboxNamespace(k)}.localhost`)];
  writeFileSync(join(d, 'leaf.cnf'), `subjectAltName=${names.map((n) => 'DNS:' + n).join(',')}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n`);
  openssl(['x509', '-req', '-in', 'leaf.csr', '-CA', 'ca.crt', '-CAkey', 'ca.key', '-set_serial', '1', '-out', 'leaf.crt', '-days', '2', '-extfile', 'leaf.cnf']);
  return { ca: readFileSync(join(d, 'ca.crt')), certFile: join(d, 'leaf.crt'), keyFile: join(d, 'leaf.key') };
}

export const tls: Section = {
  id: 'tls',
  title: 'TLS: the embedded proxy over HTTPS (HTTP/1.1 and h2) beside nginx on the same certificate',
  estimateSeconds: { quick: 35, full: 140 },
  async run(ctx) {
    if (spawnSync('openssl', ['version'], { stdio: 'ignore' }).status !== 0) {
      const why = 'skipped: no openssl command line to make the certificates';
      return { baseline: '-', rows: [], targets: [target(PLAIN_TARGET, undefined, why), target(H2_TARGET, undefined, why)], notes: [why] };
    }
    const plan = blocks(ctx);
    const certs = makeCertificates(ctx.tmp);
    const upstream = await startUpstream(ctx, SANDBOXES);
    const { sandboxes } = upstream;
    const withTls = await startGateway(ctx.procs, { name: 'sandgate-tls', sandboxes, tls: certs }, ctx.targetOptions);
    const plainGw = await startGateway(ctx.procs, { name: 'sandgate-plain', sandboxes }, ctx.targetOptions);
    const https = (h2: boolean): HttpSide => ({ target: withTls, url: withTls.url('proxy-tls', 'https'), ca: certs.ca, h2 });
    const plain: HttpSide = { target: plainGw, url: plainGw.url('proxy') };
    const plainOfTls: HttpSide = { target: withTls, url: withTls.url('proxy') };
    const found = findNginx(['http_ssl_module', 'http_v2_module']);
    const nginx = 'skipped' in found ? undefined : await startNginx(ctx.procs, ctx.tmp, found.bin, tlsProxyServer(certs.certFile, certs.keyFile, upstream.port));
    const nginxSide = (h2: boolean): HttpSide => ({ target: nginx!, url: nginx!.url('main', 'https'), ca: certs.ca, h2 });
    await upstream.reachedBy([https(false), plain, plainOfTls, ...(nginx === undefined ? [] : [nginxSide(false)])]);

    // One sandbox host for every request: an HTTP/1.1 client holds a connection per host (undici sends the
    // Host as the SNI and opens a new connection when it changes), so many hosts would measure handshakes.
    const requests = upstream.requests(1);
    const f = new Findings();
    const measure = async (label: string, a: HttpSide, b: HttpSide, names: Names, note: string) => {
      ctx.log(`tls: ${label}, CPU per request at ${RATE} req/s`);
      const cost = await measureCost(httpPair(requests, [a], [b]), { ...plan, inFlight: OPEN }, RATE, names);
      f.cost(`${label} @ ${OPEN} open`, cost, { note, title: label });
      return cost;
    };
    if (nginx === undefined) f.notes.push(`nginx rows skipped: ${'skipped' in found ? found.skipped : ''}`);
    else {
      await measure('HTTPS/1.1', https(false), nginxSide(false), { a: 'sandgate', b: 'nginx' }, 'vs nginx TLS proxy_pass, each process alone');
      await measure('HTTPS h2', https(true), nginxSide(true), { a: 'sandgate', b: 'nginx' }, 'vs nginx TLS proxy_pass, each process alone');
    }
    const h2 = await measure('HTTPS h2 against HTTPS/1.1', https(true), https(false), { a: 'h2', b: 'HTTP/1.1' }, 'the same gateway and TLS port, one HTTP/2 connection against HTTP/1.1 connections');
    f.targets.push(target(H2_TARGET, h2.diffUs.median <= 0, `${formatDiff(h2.diffUs)} (${h2.aUs.median.toFixed(1)} vs ${h2.bUs.median.toFixed(1)} µs)`));
    await measure('HTTPS/1.1 against plain HTTP', https(false), plain, { a: 'HTTPS', b: 'plain HTTP' }, 'vs plain HTTP on a gateway without TLS');
    const door = await measure('plain HTTP', plainOfTls, plain, { a: 'with a TLS port', b: 'without' }, 'vs the same on a gateway without a TLS port');
    f.targets.push(target(PLAIN_TARGET, door.diffUs.min <= 0 && door.diffUs.max >= 0, formatDiff(door.diffUs)));
    return f.output('as each row says');
  },
};

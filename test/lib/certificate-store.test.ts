import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { connect, createServer, type Server } from 'node:tls';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { selectPair, type CertificatePair } from '../../src/lib/tls/certificate-pair.js';
import { CertificateStore, type CertificateSource, type CertificateStoreOptions, type ReloadEvent } from '../../src/lib/tls/certificate-store.js';
import { AtomicWriterVolume } from '../helpers/atomic-writer.js';
import { eventually } from '../helpers/eventually.js';
import { makeCa, needsOpenssl, OPENSSL, servedSubject, type TestCa } from '../helpers/tls-certs.js';

const pair = (source: string, names: string[]) => ({ source, names }) as unknown as CertificatePair;

describe('selectPair: the longest matching SAN wins', () => {
  const pairs = [pair('default', ['gateway.test']), pair('wild', ['*.sb.example.com']), pair('exact', ['3000-abc.sb.example.com']), pair('deeper', ['*.x.sb.example.com'])];
  it.each([
    ['3000-abc.sb.example.com', 'exact'],
    ['3000-ABC.SB.example.com.', 'exact'],
    ['other.sb.example.com', 'wild'],
    ['a.x.sb.example.com', 'deeper'],
    ['x.sb.example.com', 'wild'],
    // A wildcard covers one label only (RFC 6125 §6.4.3), and never the bare parent.
    ['a.b.sb.example.com', undefined],
    ['sb.example.com', undefined],
    ['gateway.test', 'default'],
    ['', undefined],
    ['*.sb.example.com', 'wild'],
    ['.sb.example.com', undefined],
  ])('%s → %s', (name, want) => {
    expect(selectPair(pairs, name)?.source).toBe(want);
  });
  it('an exact name beats a wildcard of the same length', () => {
    expect(selectPair([pair('w', ['*.b.c']), pair('e', ['a.b.c'])], 'a.b.c')?.source).toBe('e');
  });
});

/** A store of one set of pairs, `main`. */
const single = (from: CertificateSource, opts?: CertificateStoreOptions) => new CertificateStore({ main: { from } }, opts);

async function serve(store: CertificateStore, set = 'main', clientAuth = true): Promise<{ server: Server; port: number }> {
  const server = createServer(store.set(set).serverOptions(clientAuth), (s) => s.end('ok'));
  store.set(set).attach(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, port: (server.address() as AddressInfo).port };
}

describe.skipIf(!OPENSSL)(needsOpenssl('the certificate store'), () => {
  let ca: TestCa;
  beforeAll(() => {
    ca = makeCa();
  });
  afterAll(() => ca?.remove());

  it('a --tls-dir: openssl s_client -servername is served the pair whose SAN matches longest; no SNI gets `default`', async () => {
    const dir = join(ca.dir, 'sni');
    mkdirSync(dir);
    ca.issue('default', ['gateway.test'], { outDir: dir });
    ca.issue('wild', ['*.sb.example.com'], { outDir: dir });
    ca.issue('deeper', ['*.x.sb.example.com'], { outDir: dir });
    // A mounted Kubernetes TLS Secret: a sub-directory with tls.crt + tls.key.
    mkdirSync(join(dir, 'exact'));
    const e = ca.issue('exact', ['3000-abc.sb.example.com']);
    copyFileSync(e.certFile, join(dir, 'exact', 'tls.crt'));
    copyFileSync(e.keyFile, join(dir, 'exact', 'tls.key'));
    const store = single({ dir }, { pollMs: 0 });
    expect(store.set('main').current.map((p) => p.source)).toEqual(['deeper', 'default', 'exact', 'wild']);
    const { server, port } = await serve(store);
    try {
      expect(await servedSubject(port, '3000-abc.sb.example.com')).toContain('CN = 3000-abc.sb.example.com');
      expect(await servedSubject(port, 'other.sb.example.com')).toContain('CN = *.sb.example.com');
      expect(await servedSubject(port, 'a.x.sb.example.com')).toContain('CN = *.x.sb.example.com');
      expect(await servedSubject(port, 'elsewhere.org')).toContain('CN = gateway.test');
      expect(await servedSubject(port, undefined)).toContain('CN = gateway.test');
    } finally {
      server.close();
      store.close();
    }
  });

  it('a certificate rotated on disk is served to the next connection; a broken one is ignored, reported, then cleared', async () => {
    const dir = join(ca.dir, 'rotate');
    mkdirSync(dir);
    const first = ca.issue('first', ['one.example.com'], { outDir: dir });
    const events: ReloadEvent[] = [];
    const store = single({ certFile: first.certFile, keyFile: first.keyFile }, { pollMs: 0, debounceMs: 20, onReload: (e) => events.push(e) });
    store.start();
    const { server, port } = await serve(store);
    try {
      expect(await servedSubject(port, undefined)).toContain('CN = one.example.com');
      expect(events).toEqual([{ source: first.certFile, result: 'loaded' }]);
      // cert-manager's renewal: both files replaced.
      const second = ca.issue('second', ['two.example.com']);
      writeFileSync(first.keyFile, second.key);
      writeFileSync(first.certFile, second.cert);
      await eventually(async () => (await servedSubject(port, 'two.example.com'))?.includes('CN = two.example.com'));
      expect(await servedSubject(port, undefined)).toContain('CN = two.example.com');
      expect(events.filter((e) => e.result === 'loaded')).toHaveLength(2);

      // A half-written or garbage certificate: the last good pair keeps serving, the problem is reported.
      writeFileSync(first.certFile, '-----BEGIN CERTIFICATE-----\nnot base64 at all\n');
      await eventually(() => store.problems().join().includes('no PEM certificate'));
      expect(events.at(-1)).toMatchObject({ source: first.certFile, result: 'failed' });
      expect(await servedSubject(port, undefined)).toContain('CN = two.example.com');

      // A key that is not the certificate's is refused the same way.
      const third = ca.issue('third', ['three.example.com']);
      writeFileSync(first.certFile, third.cert);
      await eventually(() => store.problems().join().includes('does not match'));
      expect(await servedSubject(port, undefined)).toContain('CN = two.example.com');

      writeFileSync(first.keyFile, third.key);
      await eventually(async () => (await servedSubject(port, undefined))?.includes('CN = three.example.com'));
      expect(store.problems()).toEqual([]);
    } finally {
      server.close();
      store.close();
    }
  });

  it('Kubernetes TLS Secrets renewed by the atomic writer (..data swapped) are served: a pair of --tls-cert-file, a Secret as --tls-dir, one in a sub-directory', async () => {
    const one = ca.issue('k8s-one', ['one.k8s.test']);
    const two = ca.issue('k8s-two', ['two.k8s.test']);
    const sub = ca.issue('k8s-sub', ['sub.k8s.test']);
    const subNext = ca.issue('k8s-sub-next', ['sub.k8s.test', 'next.k8s.test']);
    const pairVolume = new AtomicWriterVolume(join(ca.dir, 'k8s-single'), { 'tls.crt': one.cert, 'tls.key': one.key });
    const asDir = new AtomicWriterVolume(join(ca.dir, 'k8s-dir'), { 'tls.crt': one.cert, 'tls.key': one.key });
    const parent = join(ca.dir, 'k8s-parent');
    const inSub = new AtomicWriterVolume(join(parent, 'sub'), { 'tls.crt': sub.cert, 'tls.key': sub.key });
    const stores = [
      single({ certFile: pairVolume.path('tls.crt'), keyFile: pairVolume.path('tls.key') }, { pollMs: 0, debounceMs: 20 }),
      single({ dir: asDir.dir }, { pollMs: 0, debounceMs: 20 }),
      single({ dir: parent }, { pollMs: 0, debounceMs: 20 }),
    ];
    const served = await Promise.all(stores.map((s) => serve(s)));
    for (const s of stores) s.start();
    try {
      expect(await servedSubject(served[0]!.port, undefined)).toContain('CN = one.k8s.test');
      expect(await servedSubject(served[1]!.port, undefined)).toContain('CN = one.k8s.test');
      expect(await servedSubject(served[2]!.port, 'next.k8s.test')).toContain('CN = sub.k8s.test');
      pairVolume.update({ 'tls.crt': two.cert, 'tls.key': two.key });
      asDir.update({ 'tls.crt': two.cert, 'tls.key': two.key });
      inSub.update({ 'tls.crt': subNext.cert, 'tls.key': subNext.key });
      await eventually(async () => (await servedSubject(served[0]!.port, undefined))?.includes('CN = two.k8s.test'), 10_000, 'the renewed --tls-cert-file pair');
      await eventually(async () => (await servedSubject(served[1]!.port, undefined))?.includes('CN = two.k8s.test'), 10_000, 'the renewed Secret mounted as --tls-dir');
      await eventually(() => stores[2]!.set('main').current[0]!.names.includes('next.k8s.test'), 10_000, 'the renewed Secret in a --tls-dir sub-directory');
      expect(await servedSubject(served[2]!.port, 'next.k8s.test')).toContain('CN = sub.k8s.test');
      for (const s of stores) expect(s.problems()).toEqual([]);
    } finally {
      for (const { server } of served) server.close();
      for (const s of stores) s.close();
    }
  });

  it('one store for every listener: each set serves its own pairs, only the doors set asks for client certificates, one watch follows them all', async () => {
    const proxyDir = join(ca.dir, 'one-store-proxy');
    mkdirSync(proxyDir);
    ca.issue('default', ['proxy.one.test'], { outDir: proxyDir });
    const d1 = ca.issue('doors-1', ['doors.one.test'], { both: true });
    const d2 = ca.issue('doors-2', ['doors.two.test'], { both: true });
    const doors = new AtomicWriterVolume(join(ca.dir, 'one-store-doors'), { 'tls.crt': d1.cert, 'tls.key': d1.key });
    const events: ReloadEvent[] = [];
    const store = new CertificateStore(
      { proxy: { from: { dir: proxyDir } }, doors: { from: { certFile: doors.path('tls.crt'), keyFile: doors.path('tls.key') }, clientCa: readFileSync(ca.caFile) } },
      { pollMs: 0, debounceMs: 20, onReload: (e) => events.push(e) },
    );
    expect(store.set('proxy').serverOptions()).not.toHaveProperty('requestCert');
    expect(store.set('doors').serverOptions()).toMatchObject({ requestCert: true, rejectUnauthorized: true });
    expect(store.set('doors').serverOptions(false)).not.toHaveProperty('requestCert');
    expect(() => store.set('supervisor')).toThrow(/no set "supervisor"/);
    store.start();
    const proxy = await serve(store, 'proxy');
    const ops = await serve(store, 'doors', false);
    try {
      expect(await servedSubject(proxy.port, undefined)).toContain('CN = proxy.one.test');
      expect(await servedSubject(ops.port, undefined)).toContain('CN = doors.one.test');
      ca.issue('default', ['proxy.two.test'], { outDir: proxyDir });
      doors.update({ 'tls.crt': d2.cert, 'tls.key': d2.key });
      await eventually(async () => (await servedSubject(proxy.port, undefined))?.includes('CN = proxy.two.test'), 10_000, 'the proxy set renewed');
      await eventually(async () => (await servedSubject(ops.port, undefined))?.includes('CN = doors.two.test'), 10_000, 'the doors set renewed');
      writeFileSync(join(proxyDir, 'default.crt'), 'garbage');
      await eventually(() => store.problems().join().includes('no PEM certificate'), 10_000, 'the broken proxy pair reported by the one store');
      expect(await servedSubject(proxy.port, undefined)).toContain('CN = proxy.two.test');
      expect(events.filter((e) => e.result === 'loaded').map((e) => e.source)).toEqual(['default', doors.path('tls.crt'), 'default', doors.path('tls.crt')]);
    } finally {
      proxy.server.close();
      ops.server.close();
      store.close();
    }
  });

  it('a pair that does not load at start refuses the store with tls_certificate_invalid', () => {
    const dir = join(ca.dir, 'bad');
    mkdirSync(dir);
    writeFileSync(join(dir, 'x.crt'), 'garbage');
    writeFileSync(join(dir, 'x.key'), 'garbage');
    expect(() => single({ dir })).toThrow(expect.objectContaining({ code: 'tls_certificate_invalid' }));
    expect(() => single({ dir: join(ca.dir, 'absent') })).toThrow(expect.objectContaining({ code: 'tls_certificate_invalid' }));
    expect(() => single({ certFile: join(dir, 'x.crt'), keyFile: join(dir, 'nope.key') })).toThrow(/x\.crt/);
  });

  it('refuses TLS 1.1 and CBC-only clients (hostile: a downgrade)', async () => {
    const leaf = ca.issue('modern', ['modern.example.com']);
    const store = single({ certFile: leaf.certFile, keyFile: leaf.keyFile }, { pollMs: 0 });
    const { server, port } = await serve(store);
    const handshake = (opts: object) =>
      new Promise<string>((resolve) => {
        const s = connect({ port, host: '127.0.0.1', rejectUnauthorized: false, ...opts }, () => {
          resolve(`ok ${s.getProtocol()}`);
          s.destroy();
        });
        s.on('error', (err) => resolve(`refused ${(err as NodeJS.ErrnoException).code ?? err.message}`));
      });
    try {
      expect(await handshake({ maxVersion: 'TLSv1.1', minVersion: 'TLSv1' })).toMatch(/^refused/);
      expect(await handshake({ maxVersion: 'TLSv1.2', ciphers: 'AES128-SHA:ECDHE-RSA-AES128-SHA' })).toMatch(/^refused/);
      expect(await handshake({ maxVersion: 'TLSv1.2' })).toBe('ok TLSv1.2');
      expect(await handshake({})).toBe('ok TLSv1.3');
    } finally {
      server.close();
      store.close();
    }
  });
});

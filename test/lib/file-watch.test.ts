import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { watchFile, watchFiles, type FileWatch } from '../../src/lib/file-watch.js';
import { AtomicWriterVolume } from '../helpers/atomic-writer.js';
import { eventually } from '../helpers/eventually.js';

/** The one file watch: what counts as a change of a followed file, and what does not. */
describe('file watch', () => {
  const cleanup: (() => void)[] = [];
  afterEach(() => {
    for (const f of cleanup.splice(0)) f();
  });
  const tmp = () => {
    const dir = mkdtempSync(join(tmpdir(), 'sandgate-watch-'));
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
    return dir;
  };
  const follow = (paths: string[]) => {
    const changes: number[] = [];
    const w: FileWatch = watchFiles({ paths: () => paths, onChange: () => changes.push(changes.length), onError: (err) => { throw err; }, pollMs: 0 });
    cleanup.push(() => w.close());
    return { w, changes };
  };

  it('a ..data swap is a change; a neighbouring file, or nothing, is not', () => {
    const vol = new AtomicWriterVolume(join(tmp(), 'cm'), { 'a.yaml': 'a: 1\n', 'b.yaml': 'b: 1\n' });
    const { w, changes } = follow([vol.path('a.yaml')]);
    expect(w.check()).toBe(false);
    writeFileSync(join(vol.dir, 'unrelated'), 'x');
    expect(w.check()).toBe(false);
    // Same size, and possibly the same mtime tick: the symlink now leads elsewhere.
    vol.update({ 'a.yaml': 'a: 2\n', 'b.yaml': 'b: 1\n' });
    expect(w.check()).toBe(true);
    expect(w.check()).toBe(false);
    expect(changes).toHaveLength(1);
  });

  it('a rename over the file, its removal and its return are changes', () => {
    const dir = tmp();
    const path = join(dir, 'keys.yaml');
    writeFileSync(path, 'keys: []\n');
    const { w } = follow([path]);
    writeFileSync(join(dir, 'tmp'), 'keys: []\n');
    renameSync(join(dir, 'tmp'), path);
    expect(w.check()).toBe(true);
    rmSync(path);
    expect(w.check()).toBe(true);
    expect(w.check()).toBe(false);
    writeFileSync(path, 'keys: []\n');
    expect(w.check()).toBe(true);
  });

  it('a path that cannot be watched yet is reported, and followed by the check', () => {
    const errors: Error[] = [];
    const path = join(tmp(), 'not-yet', 'file');
    const w = watchFiles({ paths: () => [path], onChange: () => undefined, onError: (e) => errors.push(e), pollMs: 0 });
    cleanup.push(() => w.close());
    expect(errors.map((e) => e.message).join()).toMatch(/cannot watch .*not-yet/);
    expect(w.check()).toBe(false);
  });

  it('calls onChange by itself after a Kubernetes atomic-writer update (no check by hand)', async () => {
    const vol = new AtomicWriterVolume(join(tmp(), 'secret'), { 'links.yaml': 'keys: []\n' });
    let changes = 0;
    const w = watchFile(vol.path('links.yaml'), () => changes++, (err) => { throw err; }, 10);
    cleanup.push(() => w.close());
    vol.update({ 'links.yaml': 'keys: [1]\n' });
    await eventually(() => changes === 1, 10_000, 'the change to be seen');
  });
});

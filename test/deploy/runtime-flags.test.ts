import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { GATEWAY_NODE_FLAGS } from '../../bench/lib/targets.js';

// The benchmark measures the gateway as it ships: the V8 flags it gives every process under test are the
// ones the image's entrypoint and `npm start` pass to node.

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

describe('the gateway runs with the V8 flags the benchmark measured', () => {
  it('Dockerfile ENTRYPOINT passes them to node before the CLI', () => {
    const line = readFileSync(join(ROOT, 'Dockerfile'), 'utf8')
      .split('\n')
      .find((l) => l.startsWith('ENTRYPOINT '));
    const argv = JSON.parse(line!.slice('ENTRYPOINT '.length)) as string[];
    expect(argv).toEqual(['node', ...GATEWAY_NODE_FLAGS, 'dist/src/cli/main.js']);
  });

  it('npm start passes them to node before the CLI', () => {
    const start = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: { start: string } }).scripts.start;
    expect(start.split(' ')).toEqual(['node', ...GATEWAY_NODE_FLAGS, 'dist/src/cli/main.js', 'serve']);
  });
});

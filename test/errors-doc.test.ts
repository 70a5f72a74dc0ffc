import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ERROR_CODES } from '../src/domain/errors.js';

describe('docs/errors.md', () => {
  const doc = readFileSync(new URL('../docs/errors.md', import.meta.url), 'utf8');

  it.each(Object.keys(ERROR_CODES))('lists %s', (code) => {
    expect(doc).toContain('`' + code + '`');
  });

  it('shows each client-facing code with its status', () => {
    for (const [code, { status }] of Object.entries(ERROR_CODES)) {
      const row = doc.split('\n').find((l) => l.startsWith('| `' + code + '`'));
      expect(row, code).toBeDefined();
      if (row!.split('|').length > 4) expect(row, code).toContain(`| ${status} |`);
    }
  });
});

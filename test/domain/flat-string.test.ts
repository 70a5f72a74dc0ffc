import { describe, expect, it } from 'vitest';
import { flat } from '../../src/domain/flat-string.js';

describe('flat', () => {
  it('returns the same characters, astral ones and lone surrogates included', () => {
    const parts = ['bench-0', '/', 'sb-12345', '-😀-', '\ud800', 'é'];
    let built = '';
    for (const p of parts) built += p;
    expect(flat(built)).toBe(parts.join(''));
    expect(flat('')).toBe('');
    expect(flat(`file-${process.pid}-${Number.MAX_SAFE_INTEGER}`)).toBe('file-' + String(process.pid) + '-9007199254740991');
  });
});

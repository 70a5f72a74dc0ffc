import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { CLOSE_CODES, ERROR_CODES, GRPC_STATUS } from '../src/domain/errors.js';

/**
 * docs/errors.md and src/domain/errors.ts list the same vocabulary, in both directions: every code,
 * close code and gRPC status a client or supervisor can see.
 */
describe('docs/errors.md', () => {
  const doc = readFileSync(new URL('../docs/errors.md', import.meta.url), 'utf8');
  const lines = doc.split('\n');

  it.each(Object.keys(ERROR_CODES))('lists %s', (code) => {
    expect(doc).toContain('`' + code + '`');
  });

  it('shows each client-facing code with its status', () => {
    for (const [code, { status }] of Object.entries(ERROR_CODES)) {
      const row = lines.find((l) => l.startsWith('| `' + code + '`'));
      expect(row, code).toBeDefined();
      if (row!.split('|').length > 4) expect(row, code).toContain(`| ${status} |`);
    }
  });

  it('lists no code the source does not have', () => {
    const documented = lines.map((l) => /^\| `([a-z_]+)` \|/.exec(l)?.[1]).filter((c): c is string => c !== undefined);
    expect(documented.length).toBeGreaterThan(30);
    for (const code of documented) expect(Object.keys(ERROR_CODES), code).toContain(code);
  });

  it('lists exactly the supervisor close codes, and every close number it names exists', () => {
    const section = doc.slice(doc.indexOf('### Close codes'), doc.indexOf('## gRPC statuses'));
    const listed = [...section.matchAll(/^\| (\d{4}) \|/gm)].map((m) => Number(m[1]));
    expect(listed.sort()).toEqual(Object.values(CLOSE_CODES).sort());
    for (const m of doc.matchAll(/^\| `[a-z_]+` \| \d{3} \| (\d{4}) \|/gm)) expect(Object.values(CLOSE_CODES)).toContain(Number(m[1]));
  });

  it('states the gRPC statuses ext_authz answers with', () => {
    expect(doc).toContain(`code\` ${GRPC_STATUS.allow} for an allow`);
    expect(doc).toContain(`${GRPC_STATUS.deny} (\`PERMISSION_DENIED\``);
  });
});

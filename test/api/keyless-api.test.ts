import { execFile } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { writeApiKeyFiles } from '../helpers/api-key-files.js';
import { startTestGateway, type TestGateway } from '../helpers/gateway.js';
import { ed25519Pem, writeLinkKeys } from '../helpers/link-keys.js';
import { snapshot } from '../helpers/snapshots.js';
import { TestDriver } from '../helpers/test-driver.js';

const run = promisify(execFile);
const CLI = fileURLToPath(new URL('../../dist/src/cli/main.js', import.meta.url));
const PEPPER = 'pepper-for-keyless-api-tests-0123456789abcdef';

/**
 * A call without a key on the operator API, for a namespace that requires one, is answered as the doors
 * answer it — 401 `api_key_required`, before any lookup, whether the sandbox exists or not — and
 * `sandgate link` without a key says that a key is missing instead of "No sandbox".
 */
describe('the operator API without a key, where a namespace requires one', () => {
  let t: TestGateway;
  let dir: string;
  let teamKey: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'sandgate-keyless-'));
    const files = await writeApiKeyFiles(PEPPER, { team: 'team-a' });
    teamKey = files.keys.team;
    await writeLinkKeys(join(dir, 'links.yaml'), [{ kid: 'k1', privateKey: ed25519Pem().privateKey }]);
    const sandboxes = [snapshot({ name: 'web', sessionModel: 'none' }), snapshot({ namespace: 'open', name: 'web', uid: 'u-open', sessionModel: 'none' })];
    t = await startTestGateway([new TestDriver(sandboxes)], { apiKeys: files.keysFile, keyPepperFile: files.pepperFile, apiKeyNamespaces: 'team-a', linkKeysFile: join(dir, 'links.yaml'), linkScheme: 'http' });
  });
  afterAll(async () => {
    await t?.close();
    await rm(dir, { recursive: true, force: true });
  });

  const answer = async (r: Response) => [r.status, ((await r.json()) as { code: string }).code];

  it('answers 401 api_key_required for an existing sandbox of a key-required namespace, and the same for a missing one', async () => {
    expect(await answer(await fetch(`${t.admin}/v1/sandboxes/team-a/web`))).toEqual([401, 'api_key_required']);
    expect(await answer(await fetch(`${t.admin}/v1/sandboxes/team-a/nothing`))).toEqual([401, 'api_key_required']);
    const mint = await fetch(`${t.admin}/v1/sandboxes/team-a/web/links`, { method: 'POST', body: JSON.stringify({ port: 80 }) });
    expect(await answer(mint)).toEqual([401, 'api_key_required']);
    expect(await answer(await fetch(`${t.admin}/console/api/phase-changes?namespace=team-a&name=web`))).toEqual([401, 'api_key_required']);
    // A namespace that requires no key is still open without one; the team's key still reads its own.
    expect((await fetch(`${t.admin}/v1/sandboxes/open/web`)).status).toBe(200);
    expect(await answer(await fetch(`${t.admin}/v1/sandboxes/open/nothing`))).toEqual([404, 'sandbox_not_found']);
    expect((await fetch(`${t.admin}/v1/sandboxes/team-a/web`, { headers: { 'x-api-key': teamKey } })).status).toBe(200);
  });

  // Two CLI processes: each starts a Node process, slow on a loaded machine.
  it('sandgate link without a key says that a key is missing', async () => {
    const env = { ...process.env };
    delete env.SANDGATE_API_KEY;
    const failed = run(process.execPath, [CLI, 'link', '--namespace', 'team-a', '--name', 'web', '--port', '80', '--api-url', t.admin], { env });
    await expect(failed).rejects.toMatchObject({ code: 2, stderr: expect.stringMatching(/api_key_required: namespace team-a requires an API key, and none was given/) });
    const ok = await run(process.execPath, [CLI, 'link', '--namespace', 'team-a', '--name', 'web', '--port', '80', '--api-url', t.admin, '--api-key', teamKey], { env });
    expect(ok.stdout).toMatch(/^http:\/\/80-web\.team-a\./);
  }, 60_000);
});

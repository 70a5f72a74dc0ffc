import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ENVD_TOKEN, patternSha256, startE2bWorld, TRAFFIC_TOKEN, USER_PORT, type E2bWorld, type Mode, type Path } from './harness.js';

const FIVE_MIB = 5 * 1024 * 1024;

/** Resolves with the first event of `name` whose first argument passes `match`. */
function nextEvent(world: E2bWorld, name: string, match: (a: unknown) => boolean = () => true): Promise<unknown[]> {
  return new Promise((resolve) => {
    const on = (...args: unknown[]) => {
      if (!match(args[0])) return;
      world.envd.events.off(name, on);
      resolve(args);
    };
    world.envd.events.on(name, on);
  });
}

/** The requests envd received with X-Access-Token `token` while `body` ran. */
async function envdRequestsWithToken(world: E2bWorld, token: string, body: () => Promise<void>): Promise<unknown[]> {
  const seen: unknown[] = [];
  const onHeaders = (_p: string, h: Record<string, unknown>) => h['x-access-token'] === token && seen.push(h);
  world.envd.events.on('headers', onHeaders);
  try {
    await body();
  } finally {
    world.envd.events.off('headers', onHeaders);
  }
  return seen;
}

/** The SDK's cases, in sandbox-URL mode and host mode, against a world whose traffic takes `path`. */
export function e2bCases(path: Path): void {
  let started: E2bWorld | undefined;
  beforeAll(async () => {
    started = await startE2bWorld(path);
  });
  afterAll(async () => {
    await started?.close();
  });
  const world = (): E2bWorld => started!;
  const dir = mkdtempSync(join(tmpdir(), 'sandgate-e2b-cmd-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  for (const mode of ['sandbox-url', 'host'] as const satisfies readonly Mode[]) {
    describe(mode, () => {
      const sdk = () => world().sdk[mode];
      const key = `${mode}-live`;

      it('Sandbox.connect() and isRunning()', async () => {
        const info = await sdk().call('connect', { key, id: 'sbx-live' });
        expect(info.trafficAccessToken).toBe(TRAFFIC_TOKEN);
        expect(info.host).toBe(`${USER_PORT}-sbx-live.sandgate.test`);
        expect(await sdk().call('isRunning', { key })).toBe(true);
      });

      it('files.write then files.read returns the same bytes; X-Access-Token reaches envd, gateway credentials do not', async () => {
        const seen: Record<string, unknown>[] = [];
        const onHeaders = (p: string, h: Record<string, unknown>) => p === '/files' && seen.push(h);
        world().envd.events.on('headers', onHeaders);
        try {
          await sdk().call('write', { key, path: `/home/user/${mode}.txt`, text: 'hello from the e2b sdk\n' });
          const r = await sdk().call('read', { key, path: `/home/user/${mode}.txt` });
          expect(r.text).toBe('hello from the e2b sdk\n');
        } finally {
          world().envd.events.off('headers', onHeaders);
        }
        expect(seen.length).toBe(2);
        for (const h of seen) {
          expect(h['x-access-token']).toBe(ENVD_TOKEN);
          expect(h['e2b-traffic-access-token']).toBeUndefined();
          expect(h['x-api-key']).toBeUndefined();
          expect(h['e2b-sandbox-id']).toBeUndefined();
        }
      });

      it('a 5 MiB file round-trips byte for byte', async () => {
        await sdk().call('write', { key, path: `/home/user/${mode}.bin`, size: FIVE_MIB });
        expect(world().envd.files.get(`/home/user/${mode}.bin`)?.length).toBe(FIVE_MIB);
        const r = await sdk().call('read', { key, path: `/home/user/${mode}.bin` });
        expect(r).toMatchObject({ length: FIVE_MIB, sha256: patternSha256(FIVE_MIB) });
      });

      it("a missing file is the SDK's FileNotFoundError (envd's 404 passes through untouched)", async () => {
        const err = await sdk().error('read', { key, path: '/home/user/nope.txt' });
        expect(err.className).toBe('FileNotFoundError');
      });

      it('commands.run streams stdout as it is written and reports the exit code', async () => {
        const flag = join(dir, `${world().path}-${mode}.flag`);
        const chunks: string[] = [];
        let sawFirst: () => void = () => undefined;
        const first = new Promise<void>((r) => (sawFirst = r));
        const run = sdk().call('run', { key, runId: `${mode}-stream`, cmd: `echo first; while [ ! -e ${flag} ]; do sleep 0.02; done; echo second; echo oops >&2; exit 3` }, (e) => {
          chunks.push(e.stdout);
          if (e.stdout.includes('first')) sawFirst();
        });
        const failed = run.then(
          () => undefined,
          (e: unknown) => e as { className: string; exitCode: number; stdout: string; stderr: string },
        );
        // "first" arrives while the command is still running: nothing on the way buffers the stream.
        await Promise.race([first, failed.then((e) => Promise.reject(new Error(`the command ended before its first line arrived: ${JSON.stringify(e)}`)))]);
        expect(existsSync(flag)).toBe(false);
        writeFileSync(flag, '');
        const err = await failed;
        expect(err).toMatchObject({ className: 'CommandExitError', exitCode: 3, stdout: 'first\nsecond\n', stderr: 'oops\n' });
        expect(chunks.join('')).toBe('first\nsecond\n');
      });

      it('a pty session streams its output (Connect server stream with pty data, input over SendInput)', async () => {
        const r = await sdk().call('pty', { key });
        expect(r.exitCode).toBe(0);
        expect(r.output).toContain('pty-42');
      });

      it('an aborted command ends cleanly: envd sees the abort and its process is killed', async () => {
        const started = new Promise<void>((resolve, reject) => {
          sdk()
            .call('run', { key, runId: `${mode}-abort`, cmd: 'echo started; exec sleep 300' }, (e) => e.stdout.includes('started') && resolve())
            .then(
              () => reject(new Error('the command finished instead of being aborted')),
              (e: unknown) => reject(new Error(`the command failed before it started: ${JSON.stringify(e)}`)),
            );
        });
        const aborted = nextEvent(world(), 'aborted');
        await started;
        const exited = nextEvent(world(), 'exited');
        await sdk().call('abort', { runId: `${mode}-abort` });
        const [pid] = await aborted;
        const [exitedPid] = await exited;
        expect(exitedPid).toBe(pid);
      });

      it('a user port reached by getHost(port) needs the traffic token, which never reaches the app', async () => {
        const before = world().userSeen.length;
        const ok = await sdk().call('userPort', { key, port: USER_PORT, token: true });
        expect(ok).toEqual({ status: 200, body: 'hello from /hello' });
        const seen = world().userSeen.slice(before);
        expect(seen.length).toBe(1);
        expect(seen[0]!['e2b-traffic-access-token']).toBeUndefined();
        const refused = await sdk().call('userPort', { key, port: USER_PORT, token: false });
        expect(refused.status).toBe(401);
        expect(JSON.parse(refused.body).code).toBe('token_required');
        expect(world().userSeen.length).toBe(before + 1);
      });

      it('a wrong X-Access-Token is refused at the edge (AuthenticationError) and never reaches envd', async () => {
        const leaked = await envdRequestsWithToken(world(), 'not-the-envd-token', async () => {
          await sdk().call('connect', { key: `${mode}-bad`, id: 'sbx-badtoken' });
          const err = await sdk().error('read', { key: `${mode}-bad`, path: `/home/user/${mode}.txt` });
          expect(err.className).toBe('AuthenticationError');
          expect(err.message).toContain('envd');
          const cmd = await sdk().error('run', { key: `${mode}-bad`, runId: `${mode}-bad`, cmd: 'true' });
          expect(cmd.className).toBe('AuthenticationError');
        });
        expect(leaked).toEqual([]);
      });

      it('X-Access-Token reaches envd untouched, and envd itself refuses a wrong one (AuthenticationError)', async () => {
        const reached = await envdRequestsWithToken(world(), 'wrong-for-envd', async () => {
          await sdk().call('connect', { key: `${mode}-envdonly`, id: 'sbx-envdonly' });
          expect((await sdk().error('read', { key: `${mode}-envdonly`, path: `/home/user/${mode}.txt` })).className).toBe('AuthenticationError');
          expect((await sdk().error('run', { key: `${mode}-envdonly`, runId: `${mode}-envdonly`, cmd: 'true' })).className).toBe('AuthenticationError');
        });
        expect(reached.length).toBe(2);
      });

      it('an unknown sandbox reads as not running / not found', async () => {
        expect((await sdk().error('connect', { key: `${mode}-nope`, id: 'sbx-nope' })).className).toBe('SandboxNotFoundError');
        // Known to the control API but not to sandgate (deleted): what the SDK sees comes from the gateway.
        await sdk().call('connect', { key: `${mode}-ghost`, id: 'sbx-ghost' });
        expect(await sdk().call('isRunning', { key: `${mode}-ghost` })).toBe(false);
        const read = await sdk().error('read', { key: `${mode}-ghost`, path: '/home/user/a.txt' });
        expect(read.className).toBe('TimeoutError');
        expect(read.message).toContain('No such sandbox');
        const cmd = await sdk().error('run', { key: `${mode}-ghost`, runId: `${mode}-ghost`, cmd: 'true' });
        expect(cmd.className).toBe('SandboxNotFoundError');
      });

      it('a paused sandbox reads as not running, and says it is paused', async () => {
        await sdk().call('connect', { key: `${mode}-paused`, id: 'sbx-paused' });
        expect(await sdk().call('isRunning', { key: `${mode}-paused` })).toBe(false);
        const read = await sdk().error('read', { key: `${mode}-paused`, path: '/home/user/a.txt' });
        expect(read.className).toBe('TimeoutError');
        expect(read.message).toContain('paused: Sandbox.connect() resumes it');
      });
    });
  }
}

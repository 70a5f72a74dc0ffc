import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser } from 'playwright-core';

/**
 * Debian's Chromium driven by playwright-core (no browser download). Browser tests skip with the reason in
 * their name when no Chromium is installed; `.ci/run` installs it. `CHROMIUM_PATH` overrides the places looked at.
 */

const CHROMIUM_CANDIDATES = [process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser'].filter((p): p is string => p !== undefined && p !== '');

/** The Chromium executable, or undefined when none is installed. */
export const CHROMIUM = CHROMIUM_CANDIDATES.find((p) => existsSync(p));

/** `extraArgs`: more command-line switches (e.g. `--host-resolver-rules` for a test domain). */
export function launchChromium(extraArgs: readonly string[] = []): Promise<Browser> {
  if (CHROMIUM === undefined) throw new Error(`no Chromium at ${CHROMIUM_CANDIDATES.join(' or ')}`);
  // playwright gives each launch a fresh temporary profile (--user-data-dir) and removes it on close.
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run', '--disable-dev-shm-usage', ...extraArgs],
  });
}

/** `name`, or `name` with why it is skipped when there is no Chromium. */
export function needsChromium(name: string): string {
  return CHROMIUM === undefined ? `${name} (skipped: no Chromium at ${CHROMIUM_CANDIDATES.join(' or ')}; .ci/run installs the chromium package)` : name;
}

/** The directory a test writes its artifacts (screenshots) to: test-results/<name>/, ignored by git. */
export function outputDir(name: string): string {
  const dir = join(fileURLToPath(new URL('../../test-results/', import.meta.url)), name);
  mkdirSync(dir, { recursive: true });
  return dir;
}

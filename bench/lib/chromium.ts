import { existsSync } from 'node:fs';
import { chromium, type Browser } from 'playwright-core';

/**
 * Debian's Chromium driven by playwright-core (no browser download), for the console's browser tests and
 * its benchmark. `CHROMIUM_PATH` overrides the places looked at.
 */

export const CHROMIUM_CANDIDATES = [process.env.CHROMIUM_PATH, '/usr/bin/chromium', '/usr/bin/chromium-browser'].filter((p): p is string => p !== undefined && p !== '');

/** The Chromium executable, or undefined when none is installed. */
export const CHROMIUM = CHROMIUM_CANDIDATES.find((p) => existsSync(p));

export function launchChromium(): Promise<Browser> {
  if (CHROMIUM === undefined) throw new Error(`no Chromium at ${CHROMIUM_CANDIDATES.join(' or ')}`);
  // playwright gives each launch a fresh temporary profile (--user-data-dir) and removes it on close.
  return chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run', '--disable-dev-shm-usage'],
  });
}

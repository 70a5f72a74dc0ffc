import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { CHROMIUM, CHROMIUM_CANDIDATES } from '../../bench/lib/chromium.js';

/** Browser tests skip with the reason in their name when no Chromium is installed; `.ci/run` installs it. */

export { CHROMIUM, launchChromium } from '../../bench/lib/chromium.js';

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

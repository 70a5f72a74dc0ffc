import { SandgateError } from '../domain/errors.js';

/** Parses `90`, `90s`, `15m`, `24h`, `7d` into seconds (1 second to 366 days); `flag` names the option in errors. */
export function parseDuration(text: string, flag = '--ttl'): number {
  const m = /^(\d+)([smhd]?)$/.exec(text.trim());
  if (m === null) throw new SandgateError('config_invalid', `${flag} ${JSON.stringify(text)} must look like 3600, 90s, 15m, 24h or 7d`);
  const n = Number(m[1]) * ({ '': 1, s: 1, m: 60, h: 3600, d: 86_400 } as Record<string, number>)[m[2]!]!;
  if (n <= 0 || n > 366 * 86_400) throw new SandgateError('config_invalid', `${flag} must be between 1 second and 366 days`);
  return n;
}

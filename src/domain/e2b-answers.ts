import type { ErrorCode } from './errors.js';
import type { RouteTarget } from './route-key.js';

/**
 * How a denial reads to the E2B SDK. The SDK interprets statuses, not bodies: `isRunning()` takes 502
 * from envd's `/health` as "not running" and any other non-OK answer as "unknown" (it throws); envd HTTP
 * calls map 401 → AuthenticationError, 404 → NotFoundError (which a file read also gets for a missing
 * file), 429 → RateLimitError, 502 → TimeoutError ("the sandbox is not running anymore"); Connect calls
 * turn 429/502/503 into `unavailable`, which `commands.run` reports as SandboxNotFoundError.
 *
 * So for a request addressed the E2B way (E2B headers, or a `<port>-<id>.<domain>` host) a sandbox that
 * cannot serve — unknown, deleted, failed, paused — answers 502 like E2B's own proxy, never 404 (which
 * the SDK would confuse with a missing file), and one that will serve soon answers 429 (the SDK's only
 * "try again later"), keeping `Retry-After`. The body keeps sandgate's code (`sandbox_paused`, …), so
 * the SDK's error message says which it was. Everything else keeps its sandgate status.
 */

/** True when the target was named the E2B way. */
export function isE2bAddressed(t: RouteTarget): boolean {
  return t.source === 'e2b-headers' || (t.source === 'host' && t.id !== undefined);
}

/** The status an E2B client gets for `code`, or undefined when it keeps sandgate's own. */
export function e2bStatus(code: ErrorCode): number | undefined {
  switch (code) {
    case 'sandbox_not_found':
    case 'sandbox_gone':
    case 'sandbox_failed':
    case 'sandbox_unreachable':
    case 'sandbox_paused':
      return 502;
    case 'sandbox_not_ready':
    case 'sandbox_resume_failed':
    case 'gateway_not_ready':
    case 'gateway_busy':
    case 'relay_busy':
      return 429;
    default:
      return undefined;
  }
}

/** The message an E2B client gets for a paused sandbox: the SDK's way out is `Sandbox.connect()`. */
export const E2B_PAUSED_MESSAGE = 'The sandbox is paused: Sandbox.connect() resumes it';

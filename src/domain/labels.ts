/**
 * Validation of the names that make up a route. Kubernetes namespaces and sandbox names are DNS-1123
 * labels (RFC 1123 §2.1 as Kubernetes restricts it): 1–63 characters of [a-z0-9-], starting and ending
 * with an alphanumeric. Written as char-code loops because they run on every request.
 */

export const MAX_LABEL_LENGTH = 63;

function isLowerAlnum(c: number): boolean {
  return (c >= 0x61 && c <= 0x7a) || (c >= 0x30 && c <= 0x39);
}

/** True when `s` is a DNS-1123 label. */
export function isDnsLabel(s: string): boolean {
  const n = s.length;
  if (n === 0 || n > MAX_LABEL_LENGTH) return false;
  if (!isLowerAlnum(s.charCodeAt(0)) || !isLowerAlnum(s.charCodeAt(n - 1))) return false;
  for (let i = 1; i < n - 1; i++) {
    const c = s.charCodeAt(i);
    if (!isLowerAlnum(c) && c !== 0x2d) return false;
  }
  return true;
}

/** True for a lower-case DNS name (RFC 1123 §2.1 labels joined by dots, at most 253 characters). Off the request path: it allocates. */
export function isDnsName(s: string): boolean {
  if (s.length === 0 || s.length > 253) return false;
  for (const part of s.split('.')) if (!isDnsLabel(part)) return false;
  return true;
}

/**
 * Parses a decimal TCP port 1–65535 with no sign, no leading zero and no trailing garbage; 0 if invalid.
 * `from` and `to` bound the digits within `s` (a request's host is read in place, not sliced).
 */
export function parsePort(s: string, from = 0, to = s.length): number {
  const n = to - from;
  if (n <= 0 || n > 5) return 0;
  if (s.charCodeAt(from) === 0x30) return 0;
  let port = 0;
  for (let i = from; i < to; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x30 || c > 0x39) return 0;
    port = port * 10 + (c - 0x30);
  }
  return port <= 65535 ? port : 0;
}

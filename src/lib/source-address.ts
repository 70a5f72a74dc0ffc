import { isIPv4, isIPv6 } from 'node:net';

/**
 * The group a client address counts in for per-source limits: an IPv4 address itself (an IPv4-mapped
 * IPv6 address, `::ffff:a.b.c.d`, is that IPv4 address), an IPv6 address its /64 — the smallest prefix
 * a site is assigned (RFC 6177), so one host cannot take a fresh limit per address of its prefix.
 */
export function sourceGroup(address: string): string {
  const bare = address.split('%', 1)[0]!;
  if (isIPv4(bare)) return bare;
  if (!isIPv6(bare)) return bare;
  const lower = bare.toLowerCase();
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(lower);
  if (mapped !== null) return mapped[1]!;
  return hextets(lower).slice(0, 4).join(':') + '::/64';
}

/** The eight 16-bit groups of an IPv6 address (`::` expanded; a trailing dotted quad as two groups). */
function hextets(address: string): string[] {
  let text = address;
  const quad = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(text);
  if (quad !== null) {
    const [a, b, c, d] = quad.slice(1).map(Number) as [number, number, number, number];
    text = text.slice(0, quad.index) + ((a << 8) | b).toString(16) + ':' + ((c << 8) | d).toString(16);
  }
  const [head, tail] = text.split('::') as [string, string | undefined];
  const left = head === '' ? [] : head.split(':');
  const right = tail === undefined || tail === '' ? [] : tail.split(':');
  const zeros = tail === undefined ? [] : new Array<string>(8 - left.length - right.length).fill('0');
  return [...left, ...zeros, ...right].map((h) => parseInt(h, 16).toString(16));
}

import { BlockList, isIPv4, isIPv6 } from 'node:net';

/**
 * A set of addresses written as CIDR blocks (`10.0.0.0/8`, `fd00::/8`) or single addresses, matched with
 * node's `BlockList`. An IPv4-mapped IPv6 address (`::ffff:10.1.2.3`, how a dual-stack listener reports
 * an IPv4 peer) matches the IPv4 blocks.
 */
export class AddressSet {
  private readonly list = new BlockList();
  readonly size: number;

  /** Throws an Error naming the first entry that is not an address or a CIDR block. */
  constructor(entries: readonly string[]) {
    for (const entry of entries) this.add(entry);
    this.size = entries.length;
  }

  private add(entry: string): void {
    const slash = entry.indexOf('/');
    const address = slash < 0 ? entry : entry.slice(0, slash);
    const family = isIPv4(address) ? 'ipv4' : isIPv6(address) ? 'ipv6' : undefined;
    if (family === undefined) throw new Error(`${JSON.stringify(entry)} is not an IP address or a CIDR block`);
    const bits = family === 'ipv4' ? 32 : 128;
    const text = slash < 0 ? String(bits) : entry.slice(slash + 1);
    const prefix = /^\d{1,3}$/.test(text) ? Number(text) : NaN;
    if (!(prefix >= 0 && prefix <= bits)) throw new Error(`${JSON.stringify(entry)}: the prefix length must be 0 to ${bits}`);
    this.list.addSubnet(address, prefix, family);
  }

  /** Whether `address` (a peer address as node reports it; a zone index is ignored) is in the set. */
  has(address: string): boolean {
    if (this.size === 0) return false;
    const bare = address.split('%', 1)[0]!;
    if (isIPv4(bare)) return this.list.check(bare, 'ipv4');
    return isIPv6(bare) && this.list.check(bare, 'ipv6');
  }
}

import { describe, expect, it } from 'vitest';
import { sourceGroup } from '../../src/lib/source-address.js';

/** Per-source limits count IPv4 addresses one by one and IPv6 addresses by their /64. */
// Address in, group out: each address form is its own row of one table.
describe('sourceGroup', () => {
  it.each([
    ['203.0.113.7', '203.0.113.7'],
    ['::ffff:203.0.113.7', '203.0.113.7'],
    ['::FFFF:203.0.113.7', '203.0.113.7'],
    ['2001:db8:1:2:3:4:5:6', '2001:db8:1:2::/64'],
    ['2001:db8:1:2:ffff:ffff:ffff:ffff', '2001:db8:1:2::/64'],
    ['2001:0DB8:0001:0002::1', '2001:db8:1:2::/64'],
    ['2001:db8::1', '2001:db8:0:0::/64'],
    ['2001:db8:0:0:1::1', '2001:db8:0:0::/64'],
    ['::1', '0:0:0:0::/64'],
    ['::', '0:0:0:0::/64'],
    ['fe80::1%eth0', 'fe80:0:0:0::/64'],
    ['2001:db8:1:2::10.0.0.1', '2001:db8:1:2::/64'],
    ['not an address', 'not an address'],
  ])('%s → %s', (address, group) => {
    expect(sourceGroup(address)).toBe(group);
  });

  it('every address of one /64 is one group; the next /64 is another', () => {
    expect(new Set(['2001:db8:a:b::1', '2001:db8:a:b::2', '2001:db8:a:b:dead:beef:0:1'].map(sourceGroup)).size).toBe(1);
    expect(sourceGroup('2001:db8:a:c::1')).not.toBe(sourceGroup('2001:db8:a:b::1'));
  });
});

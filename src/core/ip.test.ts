import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import ipaddr from 'ipaddr.js';
import { formatIp, netContains, netContainsNet, parseCidr, parseIp } from './ip.js';
import { NetworkSet } from './network-match.js';

describe('parseIp', () => {
  it('parses and canonicalises IPv4 and IPv6', () => {
    assert.equal(formatIp(parseIp('10.1.2.3')!), '10.1.2.3');
    assert.equal(formatIp(parseIp('FD00:0:0::1')!), 'fd00::1');
    assert.equal(formatIp(parseIp('::')!), '::');
    assert.equal(formatIp(parseIp('1:0:0:1:0:0:0:1')!), '1:0:0:1::1');
    assert.equal(formatIp(parseIp('2001:db8::10.1.2.3')!), '2001:db8::a01:203');
  });
  it('normalises IPv4-mapped IPv6 client addresses to IPv4', () => {
    assert.deepEqual(parseIp('::ffff:10.1.2.3'), parseIp('10.1.2.3'));
  });
  it('rejects malformed addresses', () => {
    for (const bad of [
      '',
      '1.2.3',
      '1.2.3.4.5',
      '256.1.1.1',
      '01.2.3.4',
      '1..2.3',
      'a.b.c.d',
      ':::',
      '1::2::3',
      '12345::',
      'fd00::g',
      '1:2:3:4:5:6:7:8:9',
      ' 1.2.3.4',
    ]) {
      assert.equal(parseIp(bad), undefined, bad);
    }
  });
});

describe('parseCidr', () => {
  it('accepts CIDRs and bare IPs', () => {
    assert.deepEqual(parseCidr('10.0.0.0/8'), { ip: '10.0.0.0', prefixLen: 8 });
    assert.deepEqual(parseCidr('10.1.1.1'), { ip: '10.1.1.1', prefixLen: 32 });
    assert.deepEqual(parseCidr('::1'), { ip: '::1', prefixLen: 128 });
    assert.deepEqual(parseCidr('fd00::/8'), { ip: 'fd00::', prefixLen: 8 });
  });
  it('rejects bad prefixes and addresses', () => {
    for (const bad of ['bogus', '10.0.0.0/33', '::/129', '10.0.0.0/', '10.0.0.0/-1', '10.0.0.0/8/8']) assert.equal(parseCidr(bad), undefined, bad);
  });
  it('tells containment of networks', () => {
    assert.equal(netContainsNet(parseCidr('10.1.0.0/16')!, parseCidr('10.1.1.1')!), true);
    assert.equal(netContainsNet(parseCidr('10.1.0.0/16')!, parseCidr('10.0.0.0/8')!), false);
    assert.equal(netContainsNet(parseCidr('10.1.0.0/16')!, parseCidr('10.2.0.0/24')!), false);
  });
});

const v4 = fc.tuple(fc.nat(255), fc.nat(255), fc.nat(255), fc.nat(255)).map((o) => o.join('.'));
const v6 = fc.array(fc.nat(0xffff), { minLength: 8, maxLength: 8 }).map((h) => h.map((x) => x.toString(16)).join(':'));

describe('compiled network matcher against the ipaddr.js oracle', () => {
  it('agrees on IPv4 membership with excepts', () => {
    fc.assert(
      fc.property(v4, fc.nat(32), v4, fc.nat(32), v4, (netIp, len, exIp, exLen, client) => {
        const net = parseCidr(`${netIp}/${len}`)!;
        const except = parseCidr(`${exIp}/${exLen}`)!;
        const set = new NetworkSet([{ net, except: [except] }]);
        const c = ipaddr.parse(client);
        const inNet = c.match(ipaddr.parseCIDR(`${netIp}/${len}`));
        const inEx = c.match(ipaddr.parseCIDR(`${exIp}/${exLen}`));
        assert.equal(set.has(parseIp(client)!), inNet && !inEx);
        assert.equal(netContains(net, parseIp(client)!), inNet);
      }),
      { numRuns: 2000 },
    );
  });
  it('agrees on IPv6 membership', () => {
    fc.assert(
      fc.property(v6, fc.nat(128), v6, (netIp, len, client) => {
        const set = new NetworkSet([{ net: parseCidr(`${netIp}/${len}`)!, except: [] }]);
        const expected = ipaddr.parse(client).match(ipaddr.parseCIDR(`${netIp}/${len}`));
        assert.equal(set.has(parseIp(client)!), expected);
      }),
      { numRuns: 2000 },
    );
  });
  it('never mixes families', () => {
    const all4 = new NetworkSet([{ net: parseCidr('0.0.0.0/0')!, except: [] }]);
    const all6 = new NetworkSet([{ net: parseCidr('::/0')!, except: [] }]);
    assert.equal(all4.has(parseIp('::1')!), false);
    assert.equal(all6.has(parseIp('10.0.0.1')!), false);
    assert.equal(all4.has(parseIp('::ffff:10.0.0.1')!), true);
  });
});

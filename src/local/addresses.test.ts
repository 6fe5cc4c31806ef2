import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { AddressAllocator, appAddressOf, podRangeOffset } from './addresses.js';

describe('AddressAllocator', () => {
  it('hands out 127.20.0.1, .2, … in request order, stable per pod', () => {
    const a = new AddressAllocator();
    assert.equal(a.addressOf('app', 'web-0'), '127.20.0.1');
    assert.equal(a.addressOf('app', 'web-1'), '127.20.0.2');
    assert.equal(a.addressOf('app', 'web-0'), '127.20.0.1');
    assert.equal(a.peek('app', 'web-1'), '127.20.0.2');
    assert.equal(a.peek('app', 'nope'), undefined);
    assert.equal(a.addressOf('other', 'web-0'), '127.20.0.3', 'same name in another namespace is another pod');
  });

  it('skips .0 and .255 and crosses into the next /24', () => {
    const a = new AddressAllocator('127.20.0.253');
    assert.deepEqual(
      ['a', 'b', 'c', 'd'].map((n) => a.addressOf('ns', n)),
      ['127.20.0.253', '127.20.0.254', '127.20.1.1', '127.20.1.2'],
    );
  });

  it('starts where told, refuses addresses outside the pod range, and reports exhaustion', () => {
    assert.equal(new AddressAllocator('127.20.100.1').addressOf('a', 'b'), '127.20.100.1');
    assert.throws(() => new AddressAllocator('127.0.0.1'), RangeError);
    assert.throws(() => new AddressAllocator('127.20.256.1'), RangeError);
    const a = new AddressAllocator('127.20.255.254');
    assert.equal(a.addressOf('a', 'a'), '127.20.255.254');
    assert.throws(() => a.addressOf('a', 'b'), /no free address/);
  });

  it('maps a pod address to its application twin', () => {
    assert.equal(appAddressOf('127.20.3.7'), '127.21.3.7');
    assert.throws(() => appAddressOf('127.0.0.1'), RangeError);
    assert.equal(podRangeOffset('127.20.1.2'), 258);
    assert.equal(podRangeOffset('127.21.1.2'), undefined);
  });
});

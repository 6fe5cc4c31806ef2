import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isHostName, isHostNameBytes } from './detect-host-name.js';

describe('isHostName', () => {
  it('accepts DNS host names, case and underscores included', () => {
    for (const name of [
      'a',
      'localhost',
      'web.emojivoto.svc.cluster.local',
      'API.Example.com',
      '_grpc._tcp.x',
      'a-b.c-d',
      'x1.y2',
      `${'a'.repeat(63)}.b`,
      'sub.123abc',
    ]) {
      assert.equal(isHostName(name), true, name);
    }
    const longest = `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(61)}`;
    assert.equal(longest.length, 253);
    assert.equal(isHostName(longest), true);
  });

  it('rejects what is not one', () => {
    const bad = [
      '',
      '.',
      'a.',
      '.a',
      'a..b',
      '-a',
      'a-',
      'a.-b',
      'a-.b',
      'a b',
      'a\0b',
      'bücher.de',
      '10.0.0.1',
      'x.42',
      '[::1]',
      'a:80',
      `${'a'.repeat(64)}.b`,
      `${'a.'.repeat(127)}a`,
    ];
    for (const name of bad) assert.equal(isHostName(name), false, JSON.stringify(name));
  });

  it('checks only the given range and never reads outside the buffer', () => {
    const buf = Buffer.from('xx.ok.name..');
    assert.equal(isHostNameBytes(buf, 3, 10), true);
    assert.equal(isHostNameBytes(buf, 0, buf.length), false);
    assert.equal(isHostNameBytes(buf, 3, 100), false);
    assert.equal(isHostNameBytes(buf, -1, 4), false);
  });
});

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isLoopbackAddress, isLoopbackHostHeader } from './loopback.js';

describe('loopback checks', () => {
  it('takes loopback addresses in every spelling and nothing else', () => {
    for (const a of ['127.0.0.1', '127.20.0.5', '::1', '::ffff:127.0.0.1']) assert.equal(isLoopbackAddress(a), true, a);
    for (const a of ['10.0.0.1', '192.0.2.2', '::', '::ffff:10.0.0.1', 'fd00::2', 'localhost', '', undefined])
      assert.equal(isLoopbackAddress(a), false, String(a));
  });

  it('takes a Host naming loopback, with or without a port', () => {
    for (const h of ['127.0.0.1:9990', '127.0.0.1', 'localhost:9990', 'LOCALHOST', 'localhost.', 'dash.localhost:80', '[::1]:9990', '[::1]', undefined])
      assert.equal(isLoopbackHostHeader(h), true, String(h));
  });

  it('refuses a Host a rebinding page would send, and malformed ones', () => {
    for (const h of [
      'evil.example:9990',
      'evil.example',
      '127.0.0.1.evil.example',
      'localhost.evil.example',
      '10.0.0.1:9990',
      '[fd00::2]:9990',
      '[::1',
      '[::1]x',
      '127.0.0.1:99999999',
      '127.0.0.1:9990:1',
      '',
      'user@127.0.0.1',
    ])
      assert.equal(isLoopbackHostHeader(h), false, h);
  });
});

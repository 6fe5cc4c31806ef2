import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { certificatesFromPem, encodePem, isDerSequence, pemBlocks } from './pem.js';

describe('pem', () => {
  it('round-trips blocks and skips text around them', () => {
    const der = new Uint8Array(200).map((_, i) => i);
    const pem = encodePem('CERTIFICATE', der);
    assert.match(pem, /^-----BEGIN CERTIFICATE-----\n([A-Za-z0-9+/=]{64}\n){4}[A-Za-z0-9+/=]+\n-----END CERTIFICATE-----\n$/);
    const text = `subject=CN=x\n${pem}junk\r\n${encodePem('PRIVATE KEY', new Uint8Array([1, 2, 3]))}`;
    assert.deepEqual(
      pemBlocks(text).map((b) => [b.label, b.der.length]),
      [
        ['CERTIFICATE', 200],
        ['PRIVATE KEY', 3],
      ],
    );
    assert.deepEqual(certificatesFromPem(text), [der]);
    assert.deepEqual(pemBlocks('-----BEGIN CERTIFICATE-----\nAAAA\n-----END PRIVATE KEY-----\n'), []);
  });

  it('isDerSequence accepts exactly one definite-length SEQUENCE', () => {
    const seq = (len: number, lenBytes: number[]) => new Uint8Array([0x30, ...lenBytes, ...new Uint8Array(len)]);
    assert.equal(isDerSequence(seq(0, [0x00])), true);
    assert.equal(isDerSequence(seq(5, [0x05])), true);
    assert.equal(isDerSequence(seq(200, [0x81, 200])), true);
    assert.equal(isDerSequence(seq(300, [0x82, 0x01, 0x2c])), true);
    assert.equal(isDerSequence(seq(5, [0x81, 5])), false, 'non-minimal length');
    assert.equal(isDerSequence(seq(300, [0x83, 0x00, 0x01, 0x2c])), false, 'leading zero length byte');
    assert.equal(isDerSequence(seq(5, [0x80])), false, 'indefinite length');
    assert.equal(isDerSequence(new Uint8Array([0x30, 0x05, 0, 0, 0, 0])), false, 'short');
    assert.equal(isDerSequence(new Uint8Array([0x30, 0x01, 0, 0])), false, 'trailing byte');
    assert.equal(isDerSequence(new Uint8Array([0x31, 0x00])), false, 'SET');
    assert.equal(isDerSequence(new Uint8Array()), false);
  });
});

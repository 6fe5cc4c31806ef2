import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { checkPortSet, parseDefaultPolicy, parsePortSet } from './annotations.js';

describe('parsePortSet', () => {
  it('parses numbers and inclusive ranges, trimming blanks and skipping empty items', () => {
    assert.deepEqual(parsePortSet(' 25, 3306 ,8000-8003,'), new Set([25, 3306, 8000, 8001, 8002, 8003]));
    assert.deepEqual(parsePortSet('9 - 10'), new Set([9, 10]));
    assert.deepEqual(parsePortSet('1-1,65535'), new Set([1, 65535]));
    assert.deepEqual(parsePortSet(''), new Set());
  });

  it('ignores the whole value for port 0, ports above 65535, decreasing ranges and names', () => {
    for (const bad of ['0', '80,65536', '90-80', '80,mysql', '1-2-3', '8080-', '-1', '0-10', '80,http-alt']) {
      assert.equal(parsePortSet(bad), undefined, bad);
    }
  });

  it('says why a value is ignored', () => {
    assert.deepEqual(checkPortSet('3306, mysql'), { error: { kind: 'name', item: 'mysql' } });
    assert.deepEqual(checkPortSet('80, 90-80'), { error: { kind: 'range', item: '90-80' } });
    assert.deepEqual(checkPortSet('70000'), { error: { kind: 'range', item: '70000' } });
  });
});

describe('parseDefaultPolicy', () => {
  it('accepts exactly the six policy names', () => {
    for (const p of ['all-unauthenticated', 'all-authenticated', 'cluster-unauthenticated', 'cluster-authenticated', 'deny', 'audit']) {
      assert.equal(parseDefaultPolicy(p), p);
    }
    for (const bad of ['Deny', ' deny', 'allow', '']) assert.equal(parseDefaultPolicy(bad), undefined, bad);
  });
});

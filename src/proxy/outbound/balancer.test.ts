/**
 * P2C over deterministic randomness: the two draws are distinct and uniform, the less loaded of
 * the pair wins, weights only break ties, excluded endpoints are never picked; and the load
 * counters only hold busy endpoints.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { EndpointLoad, pickP2C, SWEEP_MIN } from './balancer.js';

interface Ep {
  readonly name: string;
  readonly weight: number;
}

const mk = (name: string, weight = 10_000): Ep => ({ name, weight });

/** A random source replaying `values` in order. */
function seq(...values: number[]): () => number {
  let i = 0;
  return () => {
    const v = values[i++];
    if (v === undefined) throw new Error('random called more often than expected');
    return v;
  };
}

/** A small deterministic PRNG (mulberry32). */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe('pickP2C', () => {
  const a = mk('a');
  const b = mk('b');
  const c = mk('c');

  it('returns undefined for no candidates and the only one without drawing', () => {
    assert.equal(
      pickP2C([], () => 0, seq()),
      undefined,
    );
    assert.equal(
      pickP2C([a], () => 0, seq()),
      a,
    );
    assert.equal(
      pickP2C([a, b], () => 0, seq(), new Set([a, b])),
      undefined,
    );
    assert.equal(
      pickP2C([a, b], () => 0, seq(), new Set([a])),
      b,
    );
  });

  it('draws two distinct candidates and picks the less loaded', () => {
    const load = new Map([
      [a, 5],
      [b, 1],
      [c, 3],
    ]);
    const loadOf = (e: Ep) => load.get(e) ?? 0;
    // i = floor(0.0 * 3) = 0 (a); j = floor(0.0 * 2) = 0 → skips i → 1 (b): b wins (1 < 5).
    assert.equal(pickP2C([a, b, c], loadOf, seq(0, 0)), b);
    // i = 2 (c); j = floor(0.99 * 2) = 1 (b): b wins.
    assert.equal(pickP2C([a, b, c], loadOf, seq(0.99, 0.99)), b);
    // i = 0 (a); j = floor(0.99 * 2) = 1 → 2 (c): c wins (3 < 5).
    assert.equal(pickP2C([a, b, c], loadOf, seq(0, 0.99)), c);
  });

  it('breaks ties by weight, then keeps the first drawn', () => {
    const heavy = mk('heavy', 20_000);
    assert.equal(
      pickP2C([a, heavy], () => 1, seq(0, 0)),
      heavy,
    );
    assert.equal(
      pickP2C([heavy, a], () => 1, seq(0, 0)),
      heavy,
    );
    assert.equal(
      pickP2C([a, b], () => 1, seq(0.5, 0)),
      b,
    );
    assert.equal(
      pickP2C([a, b], () => 1, seq(0, 0)),
      a,
    );
  });

  it('never picks an excluded candidate and never the most loaded of three', () => {
    const rnd = prng(42);
    const all = [a, b, c];
    const load = new Map([
      [a, 0],
      [b, 1],
      [c, 9],
    ]);
    const counts = new Map<Ep, number>();
    for (let k = 0; k < 3000; k++) {
      const p = pickP2C(all, (e) => load.get(e) ?? 0, rnd) as Ep;
      counts.set(p, (counts.get(p) ?? 0) + 1);
      assert.notEqual(
        pickP2C(all, () => 0, rnd, new Set([b])),
        b,
      );
    }
    assert.equal(counts.get(c), undefined, 'the most loaded of three is never the less loaded of a pair');
    // a wins every pair it is in (2 of 3 pairs), b the remaining one.
    assert.ok(Math.abs((counts.get(a) ?? 0) / 3000 - 2 / 3) < 0.05, JSON.stringify([...counts.values()]));
  });

  it('spreads evenly over idle candidates', () => {
    const rnd = prng(7);
    const all = [mk('0'), mk('1'), mk('2'), mk('3')];
    const counts = new Map<Ep, number>();
    for (let k = 0; k < 4000; k++) {
      const p = pickP2C(all, () => 0, rnd) as Ep;
      counts.set(p, (counts.get(p) ?? 0) + 1);
    }
    for (const e of all) assert.ok(Math.abs((counts.get(e) ?? 0) - 1000) < 150, `${e.name}: ${counts.get(e)}`);
  });
});

describe('EndpointLoad', () => {
  it('counts requests and connections per key, idempotently, and forgets idle keys', () => {
    const load = new EndpointLoad();
    const r1 = load.startRequest('x');
    const r2 = load.startRequest('x');
    const c1 = load.openConnection('x');
    assert.equal(load.inFlight('x'), 2);
    assert.equal(load.open('x'), 1);
    r1();
    r1();
    assert.equal(load.inFlight('x'), 1);
    r2();
    c1();
    assert.equal(load.inFlight('x'), 0);
    assert.equal(load.open('x'), 0);
    assert.equal(load.inFlight('y'), 0);
  });

  it('keeps an idle key for its next request, and sweeps idle keys once they pile up', () => {
    const load = new EndpointLoad();
    for (let i = 0; i < 3; i++) load.startRequest('x')();
    assert.equal(load.keys, 1);
    // Endpoints come and go: each used once, then idle.
    for (let i = 0; i < SWEEP_MIN - 2; i++) load.startRequest(`ep-${i}`)();
    assert.equal(load.keys, SWEEP_MIN - 1);
    // The next new key makes SWEEP_MIN and starts a sweep: a busy key survives it, the idle ones do not.
    const busy = load.startRequest('ep-0');
    load.startRequest('new')();
    assert.equal(load.keys, 2);
    assert.equal(load.inFlight('ep-0'), 1);
    busy();
    assert.equal(load.inFlight('ep-0'), 0);
    // Many endpoints over time: the map stays within twice what is live (and SWEEP_MIN).
    for (let i = 0; i < 10 * SWEEP_MIN; i++) load.openConnection(`c-${i}`)();
    assert.ok(load.keys <= 2 * SWEEP_MIN + 2, String(load.keys));
  });
});

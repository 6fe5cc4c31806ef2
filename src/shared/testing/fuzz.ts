/**
 * What the protocol fuzz tests (`*.fuzz.test.ts`) share: how long they run and the mutations
 * they apply to valid inputs. `npm test` runs each property a few dozen to a few hundred times
 * (seconds in all); `npm run fuzz` (scripts/fuzz.mjs) runs the same properties with
 * `WARD_FUZZ_RUNS` and `WARD_FUZZ_TIME_MS` raised, each bounded by time rather than count.
 * `WARD_FUZZ_SEED` replays a run (fast-check prints the seed and path of a failure).
 */
import fc from 'fast-check';

function envNumber(name: string): number | undefined {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return undefined;
  const n = Number(raw);
  return Number.isFinite(n) && n > 0 ? n : undefined;
}

/**
 * fast-check parameters for one property: `runs` runs by default (what `npm test` affords), or
 * `WARD_FUZZ_RUNS`; stopped after `WARD_FUZZ_TIME_MS` (default 10 s, a bound for slow machines)
 * without failing, since a time-bounded fuzz run is complete when its time is up.
 */
export function fuzzParams<T>(runs: number): fc.Parameters<T> {
  const seed = envNumber('WARD_FUZZ_SEED');
  return {
    numRuns: envNumber('WARD_FUZZ_RUNS') ?? runs,
    interruptAfterTimeLimit: envNumber('WARD_FUZZ_TIME_MS') ?? 10_000,
    markInterruptAsFailure: false,
    ...(seed === undefined ? {} : { seed }),
  };
}

/** Integers that make length and size fields interesting: bounds, off-by-ones, sign bits. */
const EDGE_VALUES = [0, 1, 2, 0x3f, 0x40, 0x7f, 0x80, 0xff, 0x100, 0x3fff, 0x4000, 0x7fff, 0x8000, 0xffff, 0x1_0000, 0xff_ffff, 0x7fff_ffff, 0xffff_ffff];

/** One edit of a byte string; positions are taken modulo its length. */
export type Mutation =
  | { readonly op: 'flip'; readonly at: number; readonly bit: number }
  | { readonly op: 'set'; readonly at: number; readonly value: number }
  | { readonly op: 'insert'; readonly at: number; readonly bytes: Uint8Array }
  | { readonly op: 'delete'; readonly at: number; readonly count: number }
  | { readonly op: 'truncate'; readonly at: number }
  | { readonly op: 'splice'; readonly from: number; readonly count: number; readonly at: number }
  | { readonly op: 'length'; readonly at: number; readonly width: number; readonly value: number; readonly delta: number };

/** Bit flips, byte sets, inserts, deletes, truncation, splicing (a piece copied elsewhere) and length-field edits. */
export const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({ op: fc.constant('flip' as const), at: fc.nat(), bit: fc.integer({ min: 0, max: 7 }) }),
  fc.record({ op: fc.constant('set' as const), at: fc.nat(), value: fc.integer({ min: 0, max: 255 }) }),
  fc.record({ op: fc.constant('insert' as const), at: fc.nat(), bytes: fc.uint8Array({ minLength: 1, maxLength: 8 }) }),
  fc.record({ op: fc.constant('delete' as const), at: fc.nat(), count: fc.integer({ min: 1, max: 16 }) }),
  fc.record({ op: fc.constant('truncate' as const), at: fc.nat() }),
  fc.record({ op: fc.constant('splice' as const), from: fc.nat(), count: fc.integer({ min: 1, max: 64 }), at: fc.nat() }),
  fc.record({
    op: fc.constant('length' as const),
    at: fc.nat(),
    width: fc.integer({ min: 1, max: 4 }),
    value: fc.constantFrom(...EDGE_VALUES),
    delta: fc.integer({ min: -2, max: 2 }),
  }),
);

/** `input` with `mutations` applied in order (a new buffer; `input` is left alone). */
export function mutate(input: Uint8Array, mutations: readonly Mutation[]): Buffer {
  let b = Buffer.from(input);
  for (const m of mutations) {
    const n = b.length;
    switch (m.op) {
      case 'flip':
        if (n > 0) b[m.at % n]! ^= 1 << m.bit;
        break;
      case 'set':
        if (n > 0) b[m.at % n] = m.value;
        break;
      case 'insert': {
        const at = m.at % (n + 1);
        b = Buffer.concat([b.subarray(0, at), m.bytes, b.subarray(at)]);
        break;
      }
      case 'delete': {
        const at = m.at % (n + 1);
        b = Buffer.concat([b.subarray(0, at), b.subarray(at + m.count)]);
        break;
      }
      case 'truncate':
        b = b.subarray(0, m.at % (n + 1));
        break;
      case 'splice': {
        if (n === 0) break;
        const from = m.from % n;
        const piece = Buffer.from(b.subarray(from, from + m.count));
        const at = m.at % (n + 1);
        b = Buffer.concat([b.subarray(0, at), piece, b.subarray(at)]);
        break;
      }
      case 'length': {
        if (n < m.width) break;
        const at = m.at % (n - m.width + 1);
        const max = 2 ** (8 * m.width) - 1;
        const v = Math.min(max, Math.max(0, m.value + m.delta)) % (max + 1);
        b.writeUIntBE(v, at, m.width);
        break;
      }
    }
  }
  return b;
}

/** Mutated versions of what `valid` generates (one to `max` edits). */
export function mutated(valid: fc.Arbitrary<Uint8Array>, max = 4): fc.Arbitrary<Buffer> {
  return fc.tuple(valid, fc.array(mutation, { minLength: 1, maxLength: max })).map(([b, ms]) => mutate(b, ms));
}

/** Cut points for splitting an input into pieces (taken modulo its length; empty pieces dropped). */
export const cuts: fc.Arbitrary<number[]> = fc.array(fc.nat(), { maxLength: 8 });

/** `input` split at `at` (positions modulo its length + 1), in order, without empty pieces. */
export function split(input: Uint8Array, at: readonly number[]): Buffer[] {
  const n = input.length;
  const points = [...new Set(at.map((p) => p % (n + 1)))].sort((a, b) => a - b);
  const out: Buffer[] = [];
  let prev = 0;
  for (const p of [...points, n]) {
    if (p > prev) out.push(Buffer.from(input.subarray(prev, p)));
    prev = Math.max(prev, p);
  }
  return out;
}

/** `input` one byte at a time. */
export function bytewise(input: Uint8Array): Buffer[] {
  const out: Buffer[] = [];
  for (let i = 0; i < input.length; i++) out.push(Buffer.from(input.subarray(i, i + 1)));
  return out;
}

/** A Latin-1 string of arbitrary octets. */
export function latin1(opts: { minLength?: number; maxLength?: number } = {}): fc.Arbitrary<string> {
  return fc.uint8Array(opts).map((b) => Buffer.from(b).toString('latin1'));
}

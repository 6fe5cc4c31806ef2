/**
 * The transport header decoder under arbitrary input: protobufjs is the reference for the message
 * on proto3 wire shapes both accept (any field order, repeats, unknown fields of every wire type,
 * non-minimal varints); mutated headers never throw, are prefix-stable at every offset, and decode
 * the same from a Buffer or from a Uint8Array view into a larger buffer.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import protobuf from 'protobufjs';
import { fuzzParams, mutated } from '../../shared/testing/fuzz.js';
import { isHostName } from './detect-host-name.js';
import { decodeTransportHeader, encodeTransportHeader, TRANSPORT_HEADER_PREFACE, type TransportHeader } from './transport-header.js';

const PREFACE = Buffer.from(TRANSPORT_HEADER_PREFACE, 'latin1');
const root = protobuf.parse(readFileSync(join(import.meta.dirname, 'transport-header.proto'), 'utf8')).root;
const Header = root.lookupType('transport.l5d.io.Header');

function framed(message: Uint8Array): Buffer {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(message.length);
  return Buffer.concat([PREFACE, len, message]);
}

/** A varint of `v` (a bigint below 2^64), padded with `extra` redundant continuation bytes (at most 10 bytes in all). */
function varint(v: bigint, extra = 0): number[] {
  const out: number[] = [];
  do {
    out.push(Number(v & 0x7fn) | 0x80);
    v >>= 7n;
  } while (v > 0n);
  for (let i = 0; i < extra && out.length < 10; i++) out.push(0x80);
  out[out.length - 1]! &= 0x7f;
  return out;
}

const tag = (field: number, wire: number, extra = 0) => varint(BigInt(field) * 8n + BigInt(wire), extra);
const delimited = (field: number, body: readonly number[], extra = 0) => [...tag(field, 2), ...varint(BigInt(body.length), extra), ...body];

/**
 * An unknown field (number `minField` and up) of any wire type; a group holds fields of its own.
 * protobufjs 8.8 refuses every group (its generated decoders check the end group against the
 * whole tag instead of the field number), so the comparison with it leaves groups out.
 */
function unknownField(minField: number, groups = false): fc.Arbitrary<number[]> {
  const field = fc.oneof(fc.integer({ min: minField, max: 20 }), fc.integer({ min: minField, max: 2 ** 29 - 1 }));
  const scalar = fc.oneof(
    fc.tuple(field, fc.bigInt({ min: 0n, max: 2n ** 64n - 1n })).map(([f, v]) => [...tag(f, 0), ...varint(v)]),
    fc.tuple(field, fc.uint8Array({ minLength: 8, maxLength: 8 })).map(([f, b]) => [...tag(f, 1), ...b]),
    fc.tuple(field, fc.uint8Array({ maxLength: 20 })).map(([f, b]) => delimited(f, [...b])),
    fc.tuple(field, fc.uint8Array({ minLength: 4, maxLength: 4 })).map(([f, b]) => [...tag(f, 5), ...b]),
  );
  const group = fc.tuple(field, fc.array(scalar, { maxLength: 3 })).map(([f, inner]) => [...tag(f, 3), ...inner.flat(), ...tag(f, 4)]);
  return groups ? fc.oneof(scalar, group) : scalar;
}

type Session = 'http1' | 'http2' | undefined;

/** A field of `Header` and what it sets. */
type Field = { bytes: number[]; port?: number; name?: Uint8Array; session?: Session; isSession?: true };

const portField: fc.Arbitrary<Field> = fc
  .tuple(fc.oneof(fc.integer({ min: 0, max: 70_000 }), fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 })), fc.nat(3))
  .map(([port, extra]) => ({ bytes: [...tag(1, 0), ...varint(BigInt.asUintN(64, BigInt(port)), extra)], port }));

const hostLike = fc.stringMatching(/^[a-z0-9]([a-z0-9.-]{0,30}[a-z0-9])?$/).map((s) => new Uint8Array(Buffer.from(s, 'latin1')));
const nameField: fc.Arbitrary<Field> = fc
  .tuple(fc.oneof(hostLike, fc.uint8Array({ maxLength: 12 }), fc.constant(new Uint8Array(0))), fc.nat(2))
  .map(([name, extra]) => ({ bytes: delimited(2, [...name], extra), name }));

/** SessionProtocol with at most one member (protobufjs does not apply "last member wins" across members). */
const sessionField: fc.Arbitrary<Field> = fc
  .tuple(
    fc.constantFrom<Session>('http1', 'http2', undefined),
    fc.array(unknownField(1), { maxLength: 2 }),
    fc.array(unknownField(3), { maxLength: 2 }),
    fc.nat(),
  )
  .map(([session, memberBody, unknown, at]) => {
    const parts = [...unknown];
    if (session !== undefined) parts.splice(at % (parts.length + 1), 0, delimited(session === 'http1' ? 1 : 2, memberBody.flat()));
    return { bytes: delimited(3, parts.flat()), session, isSession: true as const };
  });

/** A Header message: fields in any order, repeats of port and name, at most one session_protocol (protobufjs replaces rather than merges it). */
const message = fc
  .array(
    fc.oneof(
      portField,
      nameField,
      unknownField(4).map((bytes): Field => ({ bytes })),
    ),
    { maxLength: 6 },
  )
  .chain((fields) => fc.tuple(fc.constant(fields), fc.option(sessionField, { nil: undefined }), fc.nat()))
  .map(([fields, session, at]) => {
    const all = [...fields];
    if (session !== undefined) all.splice(at % (all.length + 1), 0, session);
    return all;
  });

describe('transport header fuzz: protobufjs as the reference', () => {
  it('decodes what protobufjs decodes, with the proxy checks on top', () => {
    fc.assert(
      fc.property(message, (fields) => {
        const bytes = Uint8Array.from(fields.flatMap((f) => f.bytes));
        // The model: the last port and name win; the session protocol is its one member, if any.
        let port = 0;
        let name: Uint8Array = new Uint8Array(0);
        let session: Session;
        for (const f of fields) {
          if (f.port !== undefined) port = f.port;
          if (f.name !== undefined) name = f.name;
          if (f.isSession) session = f.session;
        }
        const r = decodeTransportHeader(framed(bytes));
        let pb: { port: number; name: string; sessionProtocol?: { http1?: object; http2?: object } };
        try {
          pb = Header.toObject(Header.decode(bytes), { defaults: true }) as typeof pb;
        } catch {
          // What protobufjs refuses (a name that is not UTF-8), we refuse too.
          assert.equal(r.kind, 'invalid');
          return;
        }
        assert.equal(pb.port, port, 'the model agrees with protobufjs');
        assert.equal(pb.sessionProtocol?.http1 !== undefined ? 'http1' : pb.sessionProtocol?.http2 !== undefined ? 'http2' : undefined, session);
        const nameText = Buffer.from(name).toString('latin1');
        if (port < 1 || port > 65_535 || (nameText !== '' && !isHostName(nameText))) {
          assert.equal(r.kind, 'invalid');
          return;
        }
        assert.equal(pb.name, nameText, 'the model agrees with protobufjs');
        const want: TransportHeader = { port, ...(nameText === '' ? {} : { name: nameText }), ...(session === undefined ? {} : { sessionProtocol: session }) };
        assert.deepEqual(r, { kind: 'header', header: want, consumed: PREFACE.length + 4 + bytes.length });
      }),
      fuzzParams(1000),
    );
  });
});

describe('transport header fuzz: regressions', () => {
  it('refuses a name that is not UTF-8 even when a later one replaces it, as protobufjs does', () => {
    // Found by the comparison above: name 0x80, port 1, name "a" was decoded as { port: 1, name: 'a' }.
    const bytes = Uint8Array.of(18, 1, 128, 8, 1, 18, 1, 97);
    assert.throws(() => Header.decode(bytes));
    assert.deepEqual(decodeTransportHeader(framed(bytes)), { kind: 'invalid', reason: 'name is not UTF-8' });
    // A replaced name that is UTF-8 but no host name is fine: only the last one must be.
    assert.equal(decodeTransportHeader(framed(Uint8Array.of(18, 3, 0x61, 0x20, 0x62, 8, 1, 18, 1, 97))).kind, 'header');
  });
});

describe('transport header fuzz: mutated input', () => {
  const header = fc.record({
    port: fc.integer({ min: 1, max: 65_535 }),
    name: fc.option(fc.stringMatching(/^[a-z]([a-z0-9-]{0,10}[a-z0-9])?(\.[a-z]{1,5}){0,2}$/), { nil: undefined }),
    sessionProtocol: fc.option(fc.constantFrom('http1' as const, 'http2' as const), { nil: undefined }),
  });
  const valid = header.map(
    ({ port, name, sessionProtocol }) =>
      new Uint8Array(encodeTransportHeader({ port, ...(name === undefined ? {} : { name }), ...(sessionProtocol === undefined ? {} : { sessionProtocol }) })),
  );
  const withGroups = fc
    .tuple(message, fc.array(unknownField(4, true), { maxLength: 3 }))
    .map(([fields, unknown]) => new Uint8Array(framed(Uint8Array.from([...fields.flatMap((f) => f.bytes), ...unknown.flat()]))));
  const input = fc.oneof(valid, mutated(valid), withGroups, mutated(withGroups));

  it('never throws, is prefix-stable at every offset, and reads a view as it reads a copy', () => {
    fc.assert(
      fc.property(input, fc.uint8Array({ maxLength: 16 }), fc.nat(16), (bytes, after, offset) => {
        const whole = decodeTransportHeader(bytes);
        assert.ok(['need-more', 'header', 'invalid'].includes(whole.kind));
        if (whole.kind === 'header') assert.ok(whole.consumed <= bytes.length);
        for (let k = 0; k <= bytes.length; k++) {
          const prefix = decodeTransportHeader(bytes.subarray(0, k));
          if (prefix.kind !== 'need-more') assert.deepEqual(prefix, whole, `prefix of ${k}`);
        }
        // Bytes after a decided header do not change it; nor does where the bytes sit in memory.
        if (whole.kind !== 'need-more') assert.deepEqual(decodeTransportHeader(Buffer.concat([bytes, after])), whole);
        const backing = new Uint8Array(offset + bytes.length + 4).fill(0x61);
        backing.set(bytes, offset);
        assert.deepEqual(decodeTransportHeader(backing.subarray(offset, offset + bytes.length)), whole);
      }),
      fuzzParams(500),
    );
  });
});

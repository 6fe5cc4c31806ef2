/**
 * `io.linkerd.proxy.net` addresses <-> the text addresses of the core model. IPv4 travels as one
 * fixed32 (first octet most significant), IPv6 as two fixed64 halves (most significant hextet
 * first) — POLICY-SEMANTICS §5.2.
 */
import { formatIp, type IpNet, netAddress, type ParsedIp, parseIp } from '../core/index.js';
import { MeshError } from '../shared/index.js';
import type { IPAddress, IPNetwork } from './gen/net.js';
import type { WireResult } from './wire-result.js';

const MASK32 = 0xffffffffn;

/** The wire form of a parsed address. */
export function parsedIpToWire(ip: ParsedIp): IPAddress {
  if (ip.v === 4) return { ip: { $case: 'ipv4', value: ip.w0 >>> 0 } };
  const word = (k: number) => BigInt(ip.w[k] as number);
  return { ip: { $case: 'ipv6', value: { first: (word(0) << 32n) | word(1), last: (word(2) << 32n) | word(3) } } };
}

/** Decodes a wire address; an unset oneof or out-of-range value is an error. */
export function parsedIpFromWire(m: IPAddress | undefined): WireResult<ParsedIp> {
  const ip = m?.ip;
  switch (ip?.$case) {
    case 'ipv4':
      if (!Number.isInteger(ip.value) || ip.value < 0 || ip.value > 0xffffffff) return { ok: false, message: `invalid IPv4 value ${ip.value}` };
      return { ok: true, value: { v: 4, w0: ip.value } };
    case 'ipv6': {
      const { first, last } = ip.value;
      if (first < 0n || first > 0xffffffffffffffffn || last < 0n || last > 0xffffffffffffffffn) return { ok: false, message: 'invalid IPv6 value' };
      const w = new Uint32Array([Number(first >> 32n), Number(first & MASK32), Number(last >> 32n), Number(last & MASK32)]);
      return { ok: true, value: { v: 6, w } };
    }
    case undefined:
      return { ok: false, message: 'IP address is not set' };
  }
}

/** The wire form of a text address (`10.1.2.3`, `fd00::1`); IPv4-mapped IPv6 becomes IPv4. Throws on invalid text. */
export function ipToWire(ip: string): IPAddress {
  const parsed = parseIp(ip);
  if (parsed === undefined) throw new MeshError('ERR_WIRE_INVALID_IP', `invalid IP address ${ip}`);
  return parsedIpToWire(parsed);
}

/** Decodes a wire address to canonical text. */
export function ipFromWire(m: IPAddress | undefined): WireResult<string> {
  const r = parsedIpFromWire(m);
  return r.ok ? { ok: true, value: formatIp(r.value) } : r;
}

/** The wire form of a core network. */
export function ipNetToWire(n: IpNet): IPNetwork {
  return { ip: parsedIpToWire(netAddress(n)), prefixLen: n.prefixLen };
}

/** Decodes a wire network; the prefix length must fit the address family. */
export function ipNetFromWire(m: IPNetwork | undefined): WireResult<IpNet> {
  if (m === undefined) return { ok: false, message: 'network is not set' };
  const ip = parsedIpFromWire(m.ip);
  if (!ip.ok) return ip;
  const max = ip.value.v === 4 ? 32 : 128;
  if (m.prefixLen > max) return { ok: false, message: `prefix length ${m.prefixLen} exceeds ${max}` };
  return { ok: true, value: { ip: formatIp(ip.value), prefixLen: m.prefixLen } };
}

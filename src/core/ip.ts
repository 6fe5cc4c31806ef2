/**
 * IP addresses and networks without node:net: parsing, canonical formatting and containment.
 * IPv4 is one uint32; IPv6 is four uint32 words, most significant first. IPv4-mapped IPv6
 * addresses (`::ffff:10.1.2.3`, what dual-stack sockets report) are normalised to IPv4 so that a
 * client is matched the same way whichever socket family accepted it.
 */
import type { IpNet } from './model.js';

/** A parsed address. `w` holds one word for IPv4, four for IPv6. */
export type ParsedIp = { readonly v: 4; readonly w0: number } | { readonly v: 6; readonly w: Uint32Array };

function parseV4Words(s: string): number | undefined {
  let value = 0;
  let octets = 0;
  let i = 0;
  const n = s.length;
  while (i <= n) {
    let start = i;
    let octet = 0;
    while (i < n) {
      const c = s.charCodeAt(i);
      if (c < 48 || c > 57) break;
      octet = octet * 10 + (c - 48);
      i++;
    }
    const len = i - start;
    // Leading zeros are rejected: "010" is octal to some parsers and decimal to others.
    if (len === 0 || len > 3 || octet > 255 || (len > 1 && s.charCodeAt(start) === 48)) return undefined;
    value = (value * 256 + octet) >>> 0;
    octets++;
    if (i === n) break;
    if (s.charCodeAt(i) !== 46 || octets === 4) return undefined;
    i++;
    start = i;
  }
  return octets === 4 ? value : undefined;
}

function parseV6(s: string): Uint32Array | undefined {
  if (s.length < 2 || s.length > 45) return undefined;
  const hextets: number[] = [];
  let gap = -1;
  let rest = s;
  if (rest.startsWith('::')) {
    gap = 0;
    rest = rest.slice(2);
    if (rest.length === 0) return new Uint32Array(4);
  } else if (rest.startsWith(':')) {
    return undefined;
  }
  const parts = rest.split(':');
  for (let k = 0; k < parts.length; k++) {
    const part = parts[k] as string;
    if (part === '') {
      // "a::b" splits into ["a", "", "b"]; a trailing "::" into [..., "", ""].
      if (gap !== -1) {
        if (k === parts.length - 1 && parts[k - 1] === '' && hextets.length === gap) continue;
        return undefined;
      }
      gap = hextets.length;
      if (k === parts.length - 2 && parts[k + 1] === '') break;
      continue;
    }
    if (part.includes('.')) {
      if (k !== parts.length - 1) return undefined;
      const v4 = parseV4Words(part);
      if (v4 === undefined) return undefined;
      hextets.push(v4 >>> 16, v4 & 0xffff);
      continue;
    }
    if (part.length > 4 || !/^[0-9a-fA-F]+$/.test(part)) return undefined;
    hextets.push(Number.parseInt(part, 16));
  }
  if (gap === -1 ? hextets.length !== 8 : hextets.length > 7) return undefined;
  const full = new Array<number>(8).fill(0);
  if (gap === -1) {
    for (let k = 0; k < 8; k++) full[k] = hextets[k] as number;
  } else {
    const tail = hextets.length - gap;
    for (let k = 0; k < gap; k++) full[k] = hextets[k] as number;
    for (let k = 0; k < tail; k++) full[8 - tail + k] = hextets[gap + k] as number;
  }
  const w = new Uint32Array(4);
  for (let k = 0; k < 4; k++) w[k] = (((full[2 * k] as number) << 16) | (full[2 * k + 1] as number)) >>> 0;
  return w;
}

/** Parses an IPv4 or IPv6 address (no zone, no brackets). Returns undefined when invalid. */
export function parseIp(s: string): ParsedIp | undefined {
  if (s.includes(':')) {
    const w = parseV6(s);
    if (w === undefined) return undefined;
    if (w[0] === 0 && w[1] === 0 && w[2] === 0xffff) return { v: 4, w0: w[3] as number };
    return { v: 6, w };
  }
  const w0 = parseV4Words(s);
  return w0 === undefined ? undefined : { v: 4, w0 };
}

/** Formats an address canonically (dotted quad; RFC 5952 IPv6). */
export function formatIp(ip: ParsedIp): string {
  if (ip.v === 4) {
    const n = ip.w0;
    return `${n >>> 24}.${(n >>> 16) & 255}.${(n >>> 8) & 255}.${n & 255}`;
  }
  const h: number[] = [];
  for (let k = 0; k < 4; k++) h.push((ip.w[k] as number) >>> 16, (ip.w[k] as number) & 0xffff);
  let bestStart = -1;
  let bestLen = 0;
  for (let k = 0; k < 8; ) {
    if (h[k] !== 0) {
      k++;
      continue;
    }
    let j = k;
    while (j < 8 && h[j] === 0) j++;
    if (j - k > bestLen && j - k > 1) {
      bestStart = k;
      bestLen = j - k;
    }
    k = j;
  }
  const hex = (a: number[]) => a.map((x) => x.toString(16)).join(':');
  if (bestStart === -1) return hex(h);
  return `${hex(h.slice(0, bestStart))}::${hex(h.slice(bestStart + bestLen))}`;
}

/**
 * Parses `ip/len` or a bare IP (IPv4 = /32, IPv6 = /128). The address is kept as written
 * (canonicalised), host bits included, like upstream; matching masks it.
 */
export function parseCidr(s: string): IpNet | undefined {
  const slash = s.indexOf('/');
  const ipText = slash === -1 ? s : s.slice(0, slash);
  // An IPv4-mapped IPv6 network is kept IPv6 here: only client addresses are normalised.
  const ip = ipText.includes(':') ? parseV6Net(ipText) : parseIp(ipText);
  if (ip === undefined) return undefined;
  const max = ip.v === 4 ? 32 : 128;
  let prefixLen = max;
  if (slash !== -1) {
    const lenText = s.slice(slash + 1);
    if (!/^\d{1,3}$/.test(lenText)) return undefined;
    prefixLen = Number(lenText);
    if (prefixLen > max) return undefined;
  }
  return { ip: formatIp(ip), prefixLen };
}

function parseV6Net(s: string): ParsedIp | undefined {
  const w = parseV6(s);
  return w === undefined ? undefined : { v: 6, w };
}

/** Parses the address of an `IpNet` (always valid when it came from `parseCidr`). */
export function netAddress(net: IpNet): ParsedIp {
  const ip = net.ip.includes(':') ? parseV6Net(net.ip) : parseIp(net.ip);
  if (ip === undefined) throw new Error(`invalid network address ${net.ip}`);
  return ip;
}

/** Mask of the top `bits` bits of a 32-bit word. */
export function maskBits(bits: number): number {
  if (bits <= 0) return 0;
  if (bits >= 32) return 0xffffffff;
  return (0xffffffff << (32 - bits)) >>> 0;
}

/** True when `ip` lies inside `net`. Families never mix (IPv4-mapped clients are IPv4). */
export function netContains(net: IpNet, ip: ParsedIp): boolean {
  const base = netAddress(net);
  if (base.v !== ip.v) return false;
  if (base.v === 4 && ip.v === 4) {
    const m = maskBits(net.prefixLen);
    return (base.w0 & m) >>> 0 === (ip.w0 & m) >>> 0;
  }
  if (base.v !== 6 || ip.v !== 6) return false;
  for (let k = 0; k < 4; k++) {
    const m = maskBits(net.prefixLen - 32 * k);
    if (((base.w[k] as number) & m) >>> 0 !== ((ip.w[k] as number) & m) >>> 0) return false;
  }
  return true;
}

/** True when network `inner` is entirely inside `outer`. */
export function netContainsNet(outer: IpNet, inner: IpNet): boolean {
  return inner.prefixLen >= outer.prefixLen && netContains(outer, netAddress(inner));
}

/**
 * The first host address inside `net` (network address + 1; the address itself for a /32 or
 * /128): a stand-in client "from that network".
 */
export function firstHost(net: IpNet): string {
  const base = netAddress(net);
  const max = base.v === 4 ? 32 : 128;
  if (net.prefixLen >= max) return formatIp(base);
  if (base.v === 4) {
    const m = maskBits(net.prefixLen);
    return formatIp({ v: 4, w0: (((base.w0 & m) >>> 0) + 1) >>> 0 });
  }
  const w = new Uint32Array(4);
  for (let k = 0; k < 4; k++) w[k] = ((base.w[k] as number) & maskBits(net.prefixLen - 32 * k)) >>> 0;
  w[3] = ((w[3] as number) + 1) >>> 0;
  return formatIp({ v: 6, w });
}

/** `ip/len` text of a network. */
export function formatNet(net: IpNet): string {
  return `${net.ip}/${net.prefixLen}`;
}

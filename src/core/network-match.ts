/**
 * Compiled network sets: each policy's networks become typed-array words and masks once, so a
 * per-connection check is a few integer comparisons (no parsing, no allocation).
 */
import { maskBits, netAddress, type ParsedIp } from './ip.js';
import type { IpNet, Network } from './model.js';

interface CompiledNet {
  readonly v: 4 | 6;
  /** Masked network words (1 for IPv4, 4 for IPv6). */
  readonly net: Uint32Array;
  readonly mask: Uint32Array;
}

interface CompiledNetwork {
  readonly net: CompiledNet;
  readonly except: readonly CompiledNet[];
}

function compileNet(n: IpNet): CompiledNet {
  const ip = netAddress(n);
  if (ip.v === 4) {
    const mask = maskBits(n.prefixLen);
    return { v: 4, net: Uint32Array.of((ip.w0 & mask) >>> 0), mask: Uint32Array.of(mask) };
  }
  const mask = new Uint32Array(4);
  const net = new Uint32Array(4);
  for (let k = 0; k < 4; k++) {
    mask[k] = maskBits(n.prefixLen - 32 * k);
    net[k] = ((ip.w[k] as number) & (mask[k] as number)) >>> 0;
  }
  return { v: 6, net, mask };
}

function netHas(n: CompiledNet, ip: ParsedIp): boolean {
  if (ip.v === 4) {
    return n.v === 4 && (ip.w0 & (n.mask[0] as number)) >>> 0 === n.net[0];
  }
  if (n.v !== 6) return false;
  const w = ip.w;
  const m = n.mask;
  const net = n.net;
  return (
    ((w[0] as number) & (m[0] as number)) >>> 0 === net[0] &&
    ((w[1] as number) & (m[1] as number)) >>> 0 === net[1] &&
    ((w[2] as number) & (m[2] as number)) >>> 0 === net[2] &&
    ((w[3] as number) & (m[3] as number)) >>> 0 === net[3]
  );
}

/** A compiled set of networks with excepts. */
export class NetworkSet {
  readonly #networks: readonly CompiledNetwork[];

  constructor(networks: readonly Network[]) {
    this.#networks = networks.map((n) => ({ net: compileNet(n.net), except: n.except.map(compileNet) }));
  }

  /** True when `ip` is inside some network and outside all of that network's excepts. */
  has(ip: ParsedIp): boolean {
    const nets = this.#networks;
    for (let i = 0; i < nets.length; i++) {
      const n = nets[i] as CompiledNetwork;
      if (!netHas(n.net, ip)) continue;
      let excluded = false;
      for (let j = 0; j < n.except.length; j++) {
        if (netHas(n.except[j] as CompiledNet, ip)) {
          excluded = true;
          break;
        }
      }
      if (!excluded) return true;
    }
    return false;
  }

  /** True when the set has no networks at all (an invalid authorization on the wire). */
  get isEmpty(): boolean {
    return this.#networks.length === 0;
  }
}

/**
 * Local-mode addresses. Every pod gets its own loopback address from the pod range
 * (`127.20.0.0/16`); its application listens on the twin address in `127.21.0.0/16` (same last
 * two octets), where only its proxy forwards to; kubelet-style probes come from the "node" address
 * `127.19.0.1`; `127.0.0.1` stays "the host", outside the cluster networks.
 */

/** The pod range: the cluster networks of a local mesh. */
export const POD_RANGE = '127.20.0.0/16';
/** Where kubelet-style probes come from (outside the pod range). */
export const NODE_ADDRESS = '127.19.0.1';
/** The first pod address handed out (the default). */
export const FIRST_POD_ADDRESS = '127.20.0.1';

const POD_PREFIX = '127.20.';
const APP_PREFIX = '127.21.';

/** The pod-range offset (0..65535) of a `127.20.x.y` address, or undefined for any other text. */
export function podRangeOffset(ip: string): number | undefined {
  const m = /^127\.20\.(\d{1,3})\.(\d{1,3})$/.exec(ip);
  if (m === null) return undefined;
  const x = Number(m[1]);
  const y = Number(m[2]);
  return x <= 255 && y <= 255 ? x * 256 + y : undefined;
}

/** The application's private address of a pod address: `127.20.x.y` -> `127.21.x.y`. */
export function appAddressOf(podIp: string): string {
  if (!podIp.startsWith(POD_PREFIX)) throw new RangeError(`${podIp} is not in the pod range ${POD_RANGE}`);
  return APP_PREFIX + podIp.slice(POD_PREFIX.length);
}

/** True for offsets whose last octet is 0 or 255 (skipped: they look like network/broadcast addresses). */
function isSkipped(offset: number): boolean {
  const y = offset % 256;
  return y === 0 || y === 255;
}

/**
 * Hands out pod addresses: one per `namespace/name`, stable for the allocator's lifetime (a pod
 * that goes away and comes back gets its address again), each new pod the next free address
 * after the last one handed out. The caller decides the order (the controller asks for a batch's
 * pods sorted by `namespace/name`, so a mesh's first addresses follow that order).
 */
export class AddressAllocator {
  readonly #byPod = new Map<string, string>();
  #next: number;

  /** `first`: the first address to hand out (default `127.20.0.1`); throws `RangeError` outside the pod range. */
  constructor(first: string = FIRST_POD_ADDRESS) {
    const offset = podRangeOffset(first);
    if (offset === undefined) throw new RangeError(`${first} is not an address in the pod range ${POD_RANGE}`);
    this.#next = offset;
  }

  /** The pod's address, allocating one on first use. Throws `RangeError` when the range is exhausted. */
  addressOf(namespace: string, name: string): string {
    const key = `${namespace}/${name}`;
    const known = this.#byPod.get(key);
    if (known !== undefined) return known;
    while (this.#next < 65536 && isSkipped(this.#next)) this.#next++;
    if (this.#next >= 65536) throw new RangeError(`no free address left in the pod range ${POD_RANGE}`);
    const ip = `${POD_PREFIX}${Math.floor(this.#next / 256)}.${this.#next % 256}`;
    this.#next++;
    this.#byPod.set(key, ip);
    return ip;
  }

  /** The pod's address if it has one. */
  peek(namespace: string, name: string): string | undefined {
    return this.#byPod.get(`${namespace}/${name}`);
  }
}

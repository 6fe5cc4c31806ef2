/**
 * Loopback checks for the controller's admin API and `ward dashboard`'s forwarder, which serve
 * every workload's traffic (tap, edges) to whoever reaches them on loopback.
 *
 * A loopback peer is not enough on its own: a web page the user has open can point its own DNS
 * name at 127.0.0.1 (DNS rebinding) and read the API from the user's browser, same-origin. The
 * browser then sends that name in `Host`, so the API also wants a `Host` that names loopback.
 */
import { BlockList, isIPv4, isIPv6 } from 'node:net';

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
// BlockList checks IPv4-mapped IPv6 (`::ffff:127.0.0.1`, `::ffff:7f00:1`) against the IPv4 rule.
LOOPBACK.addAddress('::1', 'ipv6');

/** Whether `address` (an IP literal, such as a socket's `remoteAddress`) is loopback. */
export function isLoopbackAddress(address: string | undefined): boolean {
  if (address === undefined) return false;
  if (isIPv4(address)) return LOOPBACK.check(address, 'ipv4');
  if (isIPv6(address)) return LOOPBACK.check(address, 'ipv6');
  return false;
}

/**
 * Whether a request's `Host` header names loopback: `localhost` (or a name under `.localhost`,
 * which browsers resolve to loopback themselves), a 127/8 address or `[::1]`, with any port.
 * A request without `Host` passes: browsers always send one, so DNS rebinding cannot omit it.
 */
export function isLoopbackHostHeader(host: string | undefined): boolean {
  if (host === undefined) return true;
  const h = host.trim().toLowerCase();
  if (h.startsWith('[')) {
    const end = h.indexOf(']');
    if (end === -1 || !/^(:\d{1,5})?$/.test(h.slice(end + 1))) return false;
    const ip = h.slice(1, end);
    return isIPv6(ip) && isLoopbackAddress(ip);
  }
  const m = /^([^:]+)(:\d{1,5})?$/.exec(h);
  if (m === null) return false;
  const name = (m[1] as string).replace(/\.$/, '');
  if (name === 'localhost' || name.endsWith('.localhost')) return true;
  return isIPv4(name) && isLoopbackAddress(name);
}

/**
 * The original destination of a redirected connection (transparent mode, ARCHITECTURE
 * "Deployment modes"; STACK §2.12): where the client was connecting before iptables `REDIRECT`
 * sent it to the proxy. Read with `getsockopt(SO_ORIGINAL_DST)` (IPv6: `IP6T_SO_ORIGINAL_DST`)
 * through the small native addon in `native/`, built by `npm run build:native` (never at install:
 * npm 11 runs no install hooks).
 *
 * The addon is loaded lazily, only by {@link loadOriginalDst}, so explicit-ports mode and its
 * tests never need it. A connection without a NAT entry (it reached the proxy's port directly)
 * reports the socket's own local address (`redirected: false`); other failures are data
 * ({@link OriginalDstFailure}), never exceptions.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import type { Socket } from 'node:net';
import { socketFd } from '../../http/index.js';
import { errorMessage, MeshError, nativeAddonPath } from '../../shared/index.js';

/**
 * The path of the native addon for a module at `moduleUrl` in `src/proxy`, `dist/proxy` or
 * `dist/bundle` (a file path: spaces stay spaces), built for this Node's ABI (`abi`:
 * `process.versions.modules`).
 */
export function originalDstAddonPath(moduleUrl: string, abi: string = process.versions.modules): string {
  return nativeAddonPath('so_original_dst', moduleUrl, abi);
}

/** Where the native addon is built for this Node. */
export const ORIGINAL_DST_ADDON_PATH = originalDstAddonPath(import.meta.url);

/** The original destination of a connection. */
export interface OriginalDst {
  /** IPv4 dotted quad or IPv6 text, as `inet_ntop` writes it. */
  readonly address: string;
  readonly port: number;
  /** False when the connection had no NAT entry: `address`/`port` are then the socket's own local address. */
  readonly redirected: boolean;
}

/** Why the original destination could not be read. */
export interface OriginalDstFailure {
  /** `ENOTSOCK`, `EBADF`, `ENOPROTOOPT`…; `ERR_NO_FD` when the socket has no file descriptor (closed, not TCP). */
  readonly code: string;
  readonly message: string;
}

/** Result of an {@link OriginalDstReader}. */
export type OriginalDstResult = { readonly ok: true; readonly value: OriginalDst } | ({ readonly ok: false } & OriginalDstFailure);

/** Reads the original destination of an accepted socket. Never throws. */
export type OriginalDstReader = (socket: Socket) => OriginalDstResult;

/** The addon could not be loaded (code `ERR_ORIGINAL_DST_ADDON`); {@link hint} says how to fix it. */
export class OriginalDstAddonError extends MeshError {
  /** What to do about it. */
  readonly hint: string;

  constructor(message: string, hint: string, options?: { cause?: unknown }) {
    super('ERR_ORIGINAL_DST_ADDON', message, options);
    this.name = 'OriginalDstAddonError';
    this.hint = hint;
  }
}

interface Addon {
  getOriginalDst(fd: number): [string, number];
}

const BUILD_HINT = 'run `npm run build:native` (needs a C compiler and the Node headers), or use explicit ports instead of --transparent';
const loaded = new Map<string, OriginalDstReader>();

/**
 * Loads the addon at `addonPath` (default {@link ORIGINAL_DST_ADDON_PATH}; loaded once per path)
 * and returns a reader. Throws {@link OriginalDstAddonError} when it is not built or does not load.
 */
export function loadOriginalDst(addonPath: string = ORIGINAL_DST_ADDON_PATH): OriginalDstReader {
  const cached = loaded.get(addonPath);
  if (cached !== undefined) return cached;
  if (!existsSync(addonPath)) {
    throw new OriginalDstAddonError(`transparent mode needs the SO_ORIGINAL_DST addon, which is not built: ${addonPath} does not exist`, BUILD_HINT);
  }
  let addon: Addon;
  try {
    addon = createRequire(import.meta.url)(addonPath) as Addon;
  } catch (e) {
    throw new OriginalDstAddonError(`the SO_ORIGINAL_DST addon ${addonPath} does not load: ${errorMessage(e)}`, BUILD_HINT, { cause: e });
  }
  if (typeof addon.getOriginalDst !== 'function') {
    throw new OriginalDstAddonError(`the SO_ORIGINAL_DST addon ${addonPath} has no getOriginalDst function`, BUILD_HINT);
  }
  const reader = (socket: Socket) => readOriginalDst(addon, socket);
  loaded.set(addonPath, reader);
  return reader;
}

function readOriginalDst(addon: Addon, socket: Socket): OriginalDstResult {
  const fd = socketFd(socket);
  if (fd === undefined) return { ok: false, code: 'ERR_NO_FD', message: 'the socket has no file descriptor' };
  try {
    const [address, port] = addon.getOriginalDst(fd);
    return { ok: true, value: { address, port, redirected: true } };
  } catch (e) {
    const code = (e as { code?: unknown }).code;
    if (code === 'ENOENT') {
      // No NAT entry: the client connected to the proxy's port itself.
      const { localAddress, localPort } = socket;
      if (localAddress !== undefined && localPort !== undefined) return { ok: true, value: { address: localAddress, port: localPort, redirected: false } };
      return { ok: false, code: 'ERR_NO_FD', message: 'the socket is closed' };
    }
    return { ok: false, code: typeof code === 'string' ? code : 'EUNKNOWN', message: errorMessage(e) };
  }
}

/**
 * Reads one pod's proxy `/tap` stream over mesh TLS as the controller (observe/proxy-admin-client):
 * NDJSON lines, each at most {@link MAX_LINE_BYTES} (a longer one ends the stream as an error, so a
 * misbehaving peer cannot make the controller buffer without bound), parsed by
 * {@link parseProxyTapLine}. Exactly one `done` per call.
 */
import type { IncomingMessage } from 'node:http';
import { errorMessage } from '../../shared/index.js';
import { LineDecoder } from '../../sources/index.js';
import { type ProxyAdminTarget, type ProxyAdminTls, requestProxyAdmin } from '../observe/proxy-admin-client.js';
import { type ProxyTapEnd, type ProxyTapEvent, parseProxyTapLine } from './tap-event.js';

/** Longest line accepted from a proxy (its events are well under 10 KiB). */
export const MAX_LINE_BYTES = 64 * 1024;

/** How a proxy's tap stream went. */
export type ProxyTapOutcome =
  /** The proxy ended it (`end`: its summary line, when it sent one). */
  | { readonly kind: 'ended'; readonly end: ProxyTapEnd | undefined }
  /** It failed: could not open (denied, unreachable…), or broke. `code` is the client's `ERR_PROXY_ADMIN_*` or `ERR_TAP_LINE_TOO_LONG`. */
  | { readonly kind: 'failed'; readonly code: string; readonly message: string; readonly status: number | undefined }
  /** The caller aborted it. */
  | { readonly kind: 'aborted' };

/** What a reader reports. */
export interface ProxyTapHandlers {
  /** The proxy accepted the tap (it is subscribed: events from now on are seen). */
  opened?(): void;
  event(e: ProxyTapEvent): void;
  /** A line that is not an event nor the end line (skipped). */
  invalid?(): void;
  done(outcome: ProxyTapOutcome): void;
}

/** Opens a pod's tap and reports its lines until it ends, fails or `signal` aborts. Never throws. */
export function readProxyTap(
  tls: ProxyAdminTls,
  target: ProxyAdminTarget,
  path: string,
  signal: AbortSignal,
  handlers: ProxyTapHandlers,
  opts: { readonly localAddress?: string | undefined; readonly timeoutMs?: number } = {},
): void {
  let finished = false;
  const done = (o: ProxyTapOutcome): void => {
    if (finished) return;
    finished = true;
    handlers.done(o);
  };
  requestProxyAdmin(tls, target, path, {
    signal,
    timeoutMs: opts.timeoutMs ?? 5000,
    headers: { accept: 'application/x-ndjson' },
    ...(opts.localAddress !== undefined ? { localAddress: opts.localAddress } : {}),
  }).then(
    (res) => {
      handlers.opened?.();
      stream(res, signal, handlers, done);
    },
    (e: unknown) => {
      if (signal.aborted) {
        done({ kind: 'aborted' });
        return;
      }
      const code = (e as { code?: unknown }).code;
      const status = (e as { status?: unknown }).status;
      done({
        kind: 'failed',
        code: typeof code === 'string' ? code : 'ERR_PROXY_ADMIN_CONNECT',
        message: errorMessage(e),
        status: typeof status === 'number' ? status : undefined,
      });
    },
  );
}

function stream(res: IncomingMessage, signal: AbortSignal, handlers: ProxyTapHandlers, done: (o: ProxyTapOutcome) => void): void {
  const lines = new LineDecoder(MAX_LINE_BYTES);
  let end: ProxyTapEnd | undefined;
  const onAbort = (): void => {
    res.destroy();
    done({ kind: 'aborted' });
  };
  if (signal.aborted) {
    onAbort();
    return;
  }
  signal.addEventListener('abort', onAbort, { once: true });
  const finish = (o: ProxyTapOutcome): void => {
    signal.removeEventListener('abort', onAbort);
    done(o);
  };
  res.on('data', (chunk: Buffer) => {
    let got: string[];
    try {
      got = lines.push(chunk);
    } catch {
      res.destroy();
      finish({ kind: 'failed', code: 'ERR_TAP_LINE_TOO_LONG', message: `a tap line longer than ${MAX_LINE_BYTES} bytes`, status: undefined });
      return;
    }
    for (const l of got) {
      const p = parseProxyTapLine(l);
      if (p.kind === 'event') handlers.event(p.event);
      else if (p.kind === 'end') end = p.end;
      else handlers.invalid?.();
    }
  });
  res.on('end', () => finish({ kind: 'ended', end }));
  res.on('error', (e) => finish({ kind: 'failed', code: 'ERR_PROXY_ADMIN_CONNECT', message: errorMessage(e), status: undefined }));
  res.on('close', () => {
    if (!res.complete) finish({ kind: 'failed', code: 'ERR_PROXY_ADMIN_CONNECT', message: 'the tap stream closed before it ended', status: undefined });
  });
}

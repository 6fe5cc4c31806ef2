/**
 * `--controller URL`: the CLI asks a running controller's JSON API instead of reading manifests.
 * The answers are the same JSON the offline commands print, so the same formatters render them.
 */
import { UsageError } from './io.js';

const TIMEOUT_MS = 15_000;

/** Normalises `--controller`: `host:port` or a URL; http only (the API is on the admin port). */
export function controllerBase(text: string): URL {
  const withScheme = /^[a-z][a-z0-9+.-]*:\/\//i.test(text) ? text : `http://${text}`;
  let u: URL;
  try {
    u = new URL(withScheme);
  } catch {
    throw new UsageError(`--controller "${text}" is not a URL (e.g. http://127.0.0.1:9990)`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new UsageError(`--controller "${text}": only http:// and https:// are supported`);
  return u;
}

/** Calls the API; API errors and connection problems become usage errors (exit 2) with the reason. */
export async function callController(base: URL, path: string, init: { method?: string; body?: unknown } = {}): Promise<unknown> {
  const url = new URL(path, base);
  let res: Response;
  try {
    res = await fetch(url, {
      method: init.method ?? 'GET',
      headers: init.body !== undefined ? { 'content-type': 'application/json' } : {},
      ...(init.body !== undefined ? { body: JSON.stringify(init.body) } : {}),
      signal: AbortSignal.timeout(TIMEOUT_MS),
    });
  } catch (e) {
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    const why = cause?.code ?? cause?.message ?? (e as Error).message;
    throw new UsageError(`cannot reach the controller at ${base.origin}: ${why} (is \`ward controller\` running, and is this its admin address?)`);
  }
  const text = await res.text();
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new UsageError(`the controller at ${base.origin} answered ${res.status} with something that is not JSON (is this the admin port?)`);
  }
  if (!res.ok) {
    const err = (value as { error?: { code?: string; message?: string } }).error;
    throw new UsageError(err?.message !== undefined ? `controller: ${err.message}` : `controller answered ${res.status}`);
  }
  return value;
}

/**
 * Headless Chromium for the dashboard's tests: Debian's `chromium` driven by playwright-core
 * (which downloads no browser of its own). On a machine without it the tests are skipped with a
 * message naming the binary, except under CI=true, where a missing browser is a failure.
 */
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { type Browser, chromium, type Page } from 'playwright-core';

const ROOT = new URL('../../', import.meta.url).pathname;

/** Where the browser is: WARD_CHROMIUM, else Debian's path. */
export const CHROMIUM = process.env.WARD_CHROMIUM ?? '/usr/bin/chromium';

/** Why the browser tests cannot run here, or undefined when they can. Throws under CI=true. */
export function browserSkipReason(): string | undefined {
  if (existsSync(CHROMIUM)) return undefined;
  const why = `${CHROMIUM} is not installed (Debian package chromium; set WARD_CHROMIUM to use another)`;
  if (process.env.CI === 'true') throw new Error(`the dashboard's browser tests need Chromium under CI: ${why}`);
  return why;
}

/**
 * The flags of a headless Chromium on a closed network: no GPU, no sandbox (CI runs as root), and
 * none of the background connections (updates, sync, QUIC probes) the network would refuse.
 */
export const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--disable-dev-shm-usage',
];

/** Starts the browser (a fresh profile each time). */
export async function launchBrowser(): Promise<Browser> {
  return chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, headless: true, timeout: 60_000 });
}

/** The folder screenshots go to (gitignored): test-results/dashboard/. */
export function screenshotDir(): string {
  const dir = join(ROOT, 'test-results', 'dashboard');
  mkdirSync(dir, { recursive: true });
  return dir;
}

/**
 * Problems a page reports: uncaught exceptions and Content-Security-Policy violations (the
 * dashboard must run under the controller's CSP with nothing blocked).
 */
export function watchPage(page: Page): string[] {
  const problems: string[] = [];
  page.on('pageerror', (e) => problems.push(`uncaught: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && /Content Security Policy|Refused to/i.test(m.text())) problems.push(`CSP: ${m.text()}`);
  });
  return problems;
}

/**
 * Issuer hot reload: watches an identity directory and swaps in a new issuer when `issuer.crt`,
 * `issuer.key` or `ca.crt` change and the new material validates. A bad new issuer is reported
 * and the old one kept; nothing here throws or crashes the process.
 */
import { type FSWatcher, readFileSync, watch } from 'node:fs';
import { join } from 'node:path';
import type { Diagnostic, Result } from '../core/index.js';
import { errorMessage, type Logger, silentLogger } from '../shared/index.js';
import { IDENTITY_FILES, type Issuer, validateIssuer } from './ca.js';
import type { IssuerSource } from './certify.js';
import { identityDiagnostic } from './diagnostics.js';

/** Options of {@link IssuerReloader}. */
export interface IssuerReloaderOptions {
  readonly dir: string;
  /** Quiet time after the last file event before reloading (default 200 ms; writers touch several files). */
  readonly debounceMs?: number;
  /** Interval of the content check that backs up fs.watch (default 30 s; 0 disables). */
  readonly pollIntervalMs?: number;
  /** Use fs.watch (default true; polling alone when false). */
  readonly watch?: boolean;
  readonly now?: () => number;
  readonly logger?: Logger;
  /** A new issuer was validated and is now current. */
  readonly onReload?: (issuer: Issuer) => void;
  /** Changed material did not validate; the previous issuer (if any) stays current. */
  readonly onReject?: (diagnostics: readonly Diagnostic[]) => void;
}

const WATCHED = new Set<string>([IDENTITY_FILES.anchorCert, IDENTITY_FILES.issuerCert, IDENTITY_FILES.issuerKey]);

/**
 * The current issuer of a directory. `start()` loads it once and starts watching (even when
 * the first load fails, so fixing the files brings the CA up); `current()` is what the CA uses
 * for each request.
 */
export class IssuerReloader implements IssuerSource {
  readonly #opts: IssuerReloaderOptions;
  readonly #log: Logger;
  readonly #now: () => number;
  #issuer: Issuer | undefined;
  /** The file contents the current issuer came from. */
  #currentContent: string | undefined;
  /** The contents last reported as invalid, so one bad write is reported once. */
  #lastReported: string | undefined;
  #watcher: FSWatcher | undefined;
  #debounce: NodeJS.Timeout | undefined;
  #poll: NodeJS.Timeout | undefined;
  #running: Promise<void> | undefined;
  #again = false;
  #stopped = false;

  constructor(opts: IssuerReloaderOptions) {
    this.#opts = opts;
    this.#log = opts.logger ?? silentLogger();
    this.#now = opts.now ?? Date.now;
  }

  /** The issuer in force, or undefined if none has validated yet. */
  current(): Issuer | undefined {
    return this.#issuer;
  }

  /** Loads the issuer and starts watching. The result is the first load's. */
  async start(): Promise<Result<Issuer>> {
    const first = await this.#load();
    if (this.#opts.watch !== false) this.#watch();
    const pollMs = this.#opts.pollIntervalMs ?? 30_000;
    if (pollMs > 0) {
      this.#poll = setInterval(() => this.#schedule(0), pollMs);
      this.#poll.unref();
    }
    return first;
  }

  /** Re-reads the files now and swaps the issuer if they changed and validate; resolves when done. */
  async reload(): Promise<void> {
    if (this.#running !== undefined) {
      this.#again = true;
      return this.#running;
    }
    this.#running = (async () => {
      do {
        this.#again = false;
        await this.#load();
      } while (this.#again && !this.#stopped);
    })().finally(() => {
      this.#running = undefined;
    });
    return this.#running;
  }

  /** Stops watching and polling. The current issuer stays readable. */
  stop(): void {
    this.#stopped = true;
    this.#watcher?.close();
    this.#watcher = undefined;
    clearTimeout(this.#debounce);
    clearInterval(this.#poll);
  }

  #watch(): void {
    try {
      this.#watcher = watch(this.#opts.dir, { persistent: false }, (_event, file) => {
        // Kubernetes Secret volumes swap a `..data` symlink, so unknown names count as changes too.
        if (file === null || WATCHED.has(file) || file.startsWith('..')) this.#schedule(this.#opts.debounceMs ?? 200);
      });
      this.#watcher.on('error', (e) => {
        this.#log.warn({ err: errorMessage(e), dir: this.#opts.dir }, 'identity directory watch failed; relying on polling');
        this.#watcher?.close();
        this.#watcher = undefined;
      });
    } catch (e) {
      this.#log.warn({ err: errorMessage(e), dir: this.#opts.dir }, 'cannot watch the identity directory; relying on polling');
    }
  }

  #schedule(delayMs: number): void {
    if (this.#stopped) return;
    clearTimeout(this.#debounce);
    this.#debounce = setTimeout(() => {
      void this.reload();
    }, delayMs);
    this.#debounce.unref();
  }

  async #load(): Promise<Result<Issuer>> {
    try {
      return await this.#loadUnsafe();
    } catch (e) {
      // validateIssuer reports bad input as diagnostics; this is a bug or a crypto failure.
      const diagnostics = [identityDiagnostic('ID001', { file: this.#opts.dir, detail: `reload failed: ${errorMessage(e)}` })];
      this.#reject(diagnostics);
      return { ok: false, diagnostics };
    }
  }

  async #loadUnsafe(): Promise<Result<Issuer>> {
    const files = {
      anchors: join(this.#opts.dir, IDENTITY_FILES.anchorCert),
      cert: join(this.#opts.dir, IDENTITY_FILES.issuerCert),
      key: join(this.#opts.dir, IDENTITY_FILES.issuerKey),
    };
    const texts: string[] = [];
    const unreadable: Diagnostic[] = [];
    for (const file of [files.anchors, files.cert, files.key]) {
      try {
        texts.push(readFileSync(file, 'utf8'));
      } catch (e) {
        unreadable.push(identityDiagnostic('ID001', { file, detail: (e as { code?: string }).code === 'ENOENT' ? 'no such file' : errorMessage(e) }));
      }
    }
    if (unreadable.length > 0) {
      this.#reportOnce(`unreadable:${unreadable.map((d) => d.message).join('|')}`, unreadable);
      return { ok: false, diagnostics: unreadable };
    }
    const content = texts.join('\0');
    if (content === this.#currentContent && this.#issuer !== undefined) return { ok: true, value: this.#issuer, diagnostics: [] };
    const [anchorsPem, certPem, keyPem] = texts as [string, string, string];
    // Material that failed before is re-validated on every check (it may be "not valid yet"), but reported once.
    const result = await validateIssuer({ anchorsPem, certPem, keyPem, files }, this.#now());
    if (!result.ok) {
      this.#reportOnce(content, result.diagnostics);
      return result;
    }
    const previous = this.#issuer;
    this.#issuer = result.value;
    this.#currentContent = content;
    this.#lastReported = undefined;
    this.#log.info(
      { issuer: result.value.subject, fingerprint: result.value.fingerprintSha256, notAfter: new Date(result.value.notAfterMs).toISOString() },
      previous === undefined ? 'issuer loaded' : 'issuer reloaded',
    );
    try {
      this.#opts.onReload?.(result.value);
    } catch (e) {
      this.#log.error({ err: errorMessage(e) }, 'onReload callback failed');
    }
    return result;
  }

  #reportOnce(key: string, diagnostics: readonly Diagnostic[]): void {
    if (key === this.#lastReported) return;
    this.#lastReported = key;
    this.#reject(diagnostics);
  }

  #reject(diagnostics: readonly Diagnostic[]): void {
    this.#log.error(
      { problems: diagnostics.map((d) => `${d.code} ${d.message}`), keeping: this.#issuer?.subject ?? null },
      this.#issuer === undefined ? 'issuer material is invalid; Certify is unavailable' : 'new issuer material is invalid; keeping the current issuer',
    );
    try {
      this.#opts.onReject?.(diagnostics);
    } catch (e) {
      this.#log.error({ err: errorMessage(e) }, 'onReject callback failed');
    }
  }
}

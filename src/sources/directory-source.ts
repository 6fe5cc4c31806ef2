/**
 * The directory source: a directory of manifests as the cluster state. It loads every
 * `*.yaml`, `*.yml` and `*.json` below DIR, runs each file through the admission pipeline, turns
 * workloads into pods, injects pods as the proxy injector would at pod creation, and feeds the
 * result to a sink (the policy index, the endpoints index) in one transaction. Then it watches
 * DIR and applies changes incrementally: only the files that changed are read again, and only
 * the objects whose content changed are applied or deleted.
 *
 * Watching is one non-recursive `fs.watch` per directory of the tree (added by the scan that
 * lists it, before listing it, so nothing created meanwhile is missed), plus one per directory
 * holding the target of a symlinked file. A directory's watch reports every change of a name in
 * it, however the file was written: in place, truncated, copied over, or replaced by a rename.
 * Node 20's `recursive` watch cannot be used on Linux: it is implemented with one watch per file,
 * which stays on the old inode when a new file is renamed over the path, so every later edit of
 * that file went unreported until the periodic rescan.
 *
 * Invariants:
 * - Bad input never loses state. A file that stops parsing keeps every object it defined; a
 *   document that stops decoding or is rejected by admission keeps the last good version of its
 *   object (when its kind and name can still be read; otherwise the whole file is kept). Every
 *   problem is reported per file (`status()`) and logged once per content version.
 * - One object defined by several files: the last file in sorted path order wins (POL006), and
 *   deleting that file brings back the other definition.
 * - A pod keeps the injection it got when it was created (namespace annotations copied then)
 *   until its own definition (the Pod, or its workload's template) changes. With
 *   `podNames: 'template-hash'` a template change is new pods under new names, and the old
 *   pods are deleted.
 * - Nothing thrown by the file system escapes: watcher failures restart the watcher with
 *   backoff, a periodic fingerprint rescan heals missed events, and a vanished DIR keeps the
 *   loaded state until it comes back.
 */
import { createHash } from 'node:crypto';
import {
  closeSync,
  constants,
  type Dirent,
  type FSWatcher,
  fstatSync,
  lstatSync,
  openSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  type Stats,
  statSync,
  watch,
} from 'node:fs';
import { basename, dirname, join, relative, resolve, sep } from 'node:path';
import { type Diagnostic, deepEqual, diagnostic } from '../core/index.js';
import {
  admitDocuments,
  duplicateDiagnostic,
  expandWorkloads,
  type InjectConfig,
  injectPod,
  isWorkload,
  type Namespace,
  type Pod,
  parseManifestText,
  type Resource,
  type ResourceKey,
  resourceKeyOf,
  resourceKeyString,
} from '../manifest/index.js';
import { Backoff, errorMessage, type Logger, MeshError, silentLogger } from '../shared/index.js';
import { BatchTimer } from './batch-timer.js';

// === public types ===

/** The operations of one sink transaction (the policy index's `IndexTx`). */
export interface SourceTx {
  apply(resource: Resource): void;
  delete(key: ResourceKey): void;
}

/** Where a source delivers resources: anything with transactional apply/delete. */
export interface SourceSink {
  update(fn: (tx: SourceTx) => void): void;
}

/** What one batch changed. */
export interface ChangeSummary {
  /** Resources applied to the sink (new or changed). */
  readonly applied: number;
  /** Resources deleted from the sink. */
  readonly deleted: number;
  /** Files read again or removed in this batch (absolute paths, sorted). */
  readonly files: readonly string[];
  /** Epoch ms when the first file-system event of the batch was seen (or the load/rescan began). */
  readonly startedAtMs: number;
}

/** The state of one manifest file. */
export interface FileStatus {
  /** Absolute path. */
  readonly file: string;
  /** False when the latest content has error diagnostics (or could not be read). */
  readonly ok: boolean;
  /** Problems of the latest content, positioned `file:line:col` where known. */
  readonly diagnostics: readonly Diagnostic[];
  /** The objects this file currently contributes (including retained ones). */
  readonly resources: readonly ResourceKey[];
  /** Objects kept from an earlier good version because the latest one is broken. */
  readonly retained: readonly ResourceKey[];
  /** Epoch ms of the last time a version without errors was loaded. */
  readonly lastGoodAt?: number;
  /** Epoch ms of the last time a version with errors was loaded. */
  readonly lastErrorAt?: number;
}

/** Settings of a `DirectorySource`. */
export interface DirectorySourceOptions {
  readonly dir: string;
  /** Injector settings (the control-plane namespace pods get labelled with). */
  readonly config: InjectConfig;
  readonly sink: SourceSink;
  readonly logger?: Logger;
  /** Quiet time after the last event before a batch is applied (default 50 ms). */
  readonly debounceMs?: number;
  /** Longest a batch waits under a continuous stream of events (default 1000 ms). */
  readonly maxDelayMs?: number;
  /** Period of the fingerprint rescan that heals missed events; 0 disables it (default 2000 ms). */
  readonly rescanIntervalMs?: number;
  /** Whether to use `fs.watch` at all (default true); without it only the rescan sees changes. */
  readonly watch?: boolean;
  /** Files larger than this are reported and not read (default 8 MiB). */
  readonly maxFileBytes?: number;
  /** Called after each batch that read or removed files (and after the initial load). */
  readonly onChange?: (summary: ChangeSummary) => void;
  /**
   * How workloads' pods are named (default `ordinal`: `<workload>-<i>`). `template-hash` names
   * them `<workload>-<hash>-<i>` after their template, as a cluster does: a template edit then
   * makes new pods and the old ones go, rather than changing the pods in place (`ward up`, whose
   * runtime rolls from the old pods to the new).
   */
  readonly podNames?: 'ordinal' | 'template-hash';
}

/** How long a file that turned empty is given to get its new content before it counts as emptied. */
export const EMPTY_FILE_GRACE_MS = 300;

// === internal state ===

interface FileState {
  readonly file: string;
  /** stat fingerprint at the last look (or `error:<code>`). */
  fingerprint: string;
  /** Content hash, or the read error, of the last processed version. */
  version: string;
  /** Objects in force from this file, by key string. */
  defs: Map<string, Resource>;
  retained: Set<string>;
  diagnostics: Diagnostic[];
  ok: boolean;
  lastGoodAt: number | undefined;
  lastErrorAt: number | undefined;
}

interface PodRecord {
  /** The pod as its definition writes it. */
  readonly written: Pod;
  /** The pod as the injector created it. */
  readonly created: Pod;
}

interface Pending {
  full: boolean;
  readonly paths: Set<string>;
  startedAtMs: number | undefined;
}

interface Scan {
  /** Candidate files found, with their stat fingerprint. */
  readonly files: Map<string, string>;
  /** Those of them that are symbolic links. */
  readonly links: Set<string>;
  /** Directories that could not be listed: files known below them are kept. */
  readonly unreadable: string[];
  /** The scanned root does not exist. */
  readonly missing: boolean;
}

/** One directory watched with a non-recursive `fs.watch`. */
interface DirWatch {
  readonly watcher: FSWatcher;
  /** `dev:ino` of the directory when the watch began (a directory replaced at its path needs a new watch). */
  readonly id: string;
  /** Part of DIR's tree (its events name files below DIR); otherwise it only holds targets of symlinked files. */
  tree: boolean;
}

type ReadResult =
  | { readonly ok: true; readonly text: string; readonly hash: string }
  | { readonly ok: false; readonly missing: boolean; readonly detail: string };

const MANIFEST_FILE = /\.(ya?ml|json)$/i;
const MAX_PENDING_PATHS = 1000;
const WATCHER_STABLE_MS = 30_000;

/** Dotfiles and dot-directories, editor backups, swap and lock files. */
function isIgnoredName(name: string): boolean {
  return name.startsWith('.') || name.startsWith('#') || name.endsWith('~') || /\.(swp|swx|swo|tmp|bak|orig)$/i.test(name);
}

function errnoOf(err: unknown): string {
  const code = typeof err === 'object' && err !== null ? (err as { code?: unknown }).code : undefined;
  return typeof code === 'string' ? code : 'EUNKNOWN';
}

/** Where symlink `link` leads: its final target, or where its first hop points while that is missing. */
function linkTarget(link: string): string | undefined {
  try {
    return realpathSync(link);
  } catch {
    try {
      return resolve(dirname(link), readlinkSync(link));
    } catch {
      return undefined;
    }
  }
}

function statId(s: Stats): string {
  return `${s.dev}:${s.ino}`;
}

function fingerprintOf(file: string): string {
  try {
    const s = statSync(file, { bigint: true });
    return `${s.dev}:${s.ino}:${s.mode}:${s.size}:${s.mtimeNs}:${s.ctimeNs}`;
  } catch (err) {
    return `error:${errnoOf(err)}`;
  }
}

/** Resource content without its origin (positions move when lines are inserted above). */
function sameContent(a: Resource, b: Resource): boolean {
  if (a === b) return true;
  const strip = (r: Resource): Record<string, unknown> => {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(r)) if (k !== 'origin') out[k] = v;
    return out;
  };
  return deepEqual(strip(a), strip(b));
}

function isError(d: Diagnostic): boolean {
  return d.severity === 'error';
}

function formatDiagnostic(d: Diagnostic): string {
  const where = d.source === undefined ? '' : d.source.line > 0 ? `${d.source.file}:${d.source.line}:${d.source.col}: ` : `${d.source.file}: `;
  return `${where}${d.severity} ${d.code} ${d.message}`;
}

// === the source ===

/** Feeds a sink from a directory of manifests. See the module comment for the guarantees. */
export class DirectorySource {
  readonly #dir: string;
  readonly #inject: InjectConfig;
  readonly #sink: SourceSink;
  readonly #log: Logger;
  readonly #maxDelayMs: number;
  readonly #rescanIntervalMs: number;
  readonly #useWatch: boolean;
  readonly #maxFileBytes: number;
  readonly #onChange: ((summary: ChangeSummary) => void) | undefined;
  readonly #podNames: 'ordinal' | 'template-hash';

  readonly #files = new Map<string, FileState>();
  /** Cross-file POL006 diagnostics, by the file whose definition lost. */
  #duplicates = new Map<string, Diagnostic[]>();
  #pods = new Map<string, PodRecord>();
  /** What the sink holds, by key string. */
  #applied = new Map<string, Resource>();
  readonly #expanded = new WeakMap<Resource, Pod[]>();

  #pending: Pending = { full: false, paths: new Set(), startedAtMs: undefined };
  readonly #batchTimer: BatchTimer;
  #rescanTimer: NodeJS.Timeout | undefined;
  /** The last batch threw in the sink: reconcile again even when no file changed. */
  #sinkFailed = false;
  #restartTimer: NodeJS.Timeout | undefined;
  #settleTimer: NodeJS.Timeout | undefined;
  /** Files that turned empty, with when that was first seen (see {@link EMPTY_FILE_GRACE_MS}). */
  readonly #emptySince = new Map<string, number>();
  #emptyTimer: NodeJS.Timeout | undefined;
  readonly #restartBackoff = new Backoff({ minMs: 200, maxMs: 30_000 });
  /** The directories watched, by absolute path; DIR's own watch is the root of the tree. */
  readonly #watches = new Map<string, DirWatch>();
  /** Directories whose watch could not be started (reported once each; the rescan covers them). */
  readonly #unwatchable = new Set<string>();
  /** Symlinked files and their targets (resolved), whose directories are watched too. */
  readonly #links = new Map<string, string>();
  /** {@link #links} by target; rebuilt when a link changes. */
  #linksByTarget: Map<string, string[]> | undefined;
  #watcherStartedAt = 0;
  /** `dev:ino` of DIR when the watcher was started (a recreated DIR needs a new watcher). */
  #watchedDirId: string | undefined;
  #dirMissing = false;
  #started = false;
  #stopped = false;
  #running = false;
  #lastChangeStartedAt: number | undefined;

  constructor(opts: DirectorySourceOptions) {
    this.#dir = resolve(opts.dir);
    this.#inject = opts.config;
    this.#sink = opts.sink;
    this.#log = opts.logger ?? silentLogger();
    const debounceMs = Math.max(0, opts.debounceMs ?? 50);
    this.#maxDelayMs = Math.max(debounceMs, opts.maxDelayMs ?? 1000);
    this.#batchTimer = new BatchTimer(debounceMs, this.#maxDelayMs, () => this.#flush());
    this.#rescanIntervalMs = Math.max(0, opts.rescanIntervalMs ?? 2000);
    this.#useWatch = opts.watch ?? true;
    this.#maxFileBytes = opts.maxFileBytes ?? 8 * 1024 * 1024;
    this.#onChange = opts.onChange;
    this.#podNames = opts.podNames ?? 'ordinal';
  }

  /** The watched directory (absolute). */
  get dir(): string {
    return this.#dir;
  }

  /** Epoch ms at which the last applied batch began (its first file-system event). */
  get lastChangeStartedAt(): number | undefined {
    return this.#lastChangeStartedAt;
  }

  /** True while DIR is watched with `fs.watch`. */
  get watching(): boolean {
    return this.#watches.has(this.#dir);
  }

  /**
   * Loads DIR and applies everything to the sink in one transaction, then starts watching.
   * Rejects (MeshError `ERR_SOURCE_DIR`) only when DIR is not a readable directory.
   */
  start(): Promise<void> {
    if (this.#started) return Promise.reject(new MeshError('ERR_SOURCE_STARTED', 'the directory source was already started'));
    try {
      if (!statSync(this.#dir).isDirectory()) throw new Error('not a directory');
      readdirSync(this.#dir);
    } catch (err) {
      return Promise.reject(new MeshError('ERR_SOURCE_DIR', `cannot watch ${this.#dir}: ${errorMessage(err)}`, { cause: err }));
    }
    this.#started = true;
    const startedAtMs = Date.now();
    // Watch first: events that happen during the load are applied in a later batch.
    if (this.#useWatch) this.#startWatcher();
    try {
      this.#runBatch({ full: true, paths: new Set(), startedAtMs }, true);
    } catch (err) {
      this.stop();
      return Promise.reject(new MeshError('ERR_SOURCE_LOAD', `loading ${this.#dir} failed: ${errorMessage(err)}`, { cause: err }));
    }
    if (this.#rescanIntervalMs > 0) {
      this.#rescanTimer = setInterval(() => this.rescan(), this.#rescanIntervalMs);
      this.#rescanTimer.unref();
    }
    return Promise.resolve();
  }

  /** Stops watching; pending changes are dropped. The sink keeps what it has. */
  stop(): void {
    this.#stopped = true;
    this.#closeWatcher();
    this.#batchTimer.cancel();
    for (const t of [this.#restartTimer, this.#settleTimer, this.#emptyTimer]) if (t !== undefined) clearTimeout(t);
    if (this.#rescanTimer !== undefined) clearInterval(this.#rescanTimer);
    this.#restartTimer = undefined;
    this.#settleTimer = undefined;
    this.#rescanTimer = undefined;
  }

  /**
   * Compares every file's fingerprint (device, inode, mode, size, mtime, ctime) with what was
   * loaded, and applies the differences now, with any pending events. The periodic fallback.
   */
  rescan(): void {
    if (!this.#started || this.#stopped) return;
    this.#pending.full = true;
    this.#pending.startedAtMs ??= Date.now();
    this.#flush();
  }

  /**
   * Forgets how pod `namespace/name` was created and applies it again, so the injector's
   * creation-time steps (namespace annotations copied) run anew, as when a pod is deleted and its
   * workload creates it again. False when no loaded definition makes that pod.
   */
  recreatePod(namespace: string, name: string): boolean {
    const k = resourceKeyString({ kind: 'Pod', group: '', namespace, name });
    if (!this.#started || this.#stopped || this.#running || !this.#pods.delete(k)) return false;
    this.#running = true;
    try {
      this.#reconcile(Date.now(), []);
    } finally {
      this.#running = false;
    }
    return true;
  }

  /** Per-file status, sorted by path. */
  status(): FileStatus[] {
    return [...this.#files.keys()].sort().map((file) => {
      const st = this.#files.get(file) as FileState;
      const keys = (ks: Iterable<string>): ResourceKey[] =>
        [...ks].flatMap((k) => {
          const r = st.defs.get(k);
          return r === undefined ? [] : [resourceKeyOf(r)];
        });
      return {
        file,
        ok: st.ok,
        diagnostics: [...st.diagnostics, ...(this.#duplicates.get(file) ?? [])],
        resources: keys(st.defs.keys()),
        retained: keys(st.retained),
        ...(st.lastGoodAt !== undefined ? { lastGoodAt: st.lastGoodAt } : {}),
        ...(st.lastErrorAt !== undefined ? { lastErrorAt: st.lastErrorAt } : {}),
      };
    });
  }

  // === watching ===

  /** Watches DIR itself; the scans that follow add its subdirectories (every caller rescans). */
  #startWatcher(): boolean {
    if (this.#stopped) return false;
    this.#closeWatcher();
    try {
      const id = statId(statSync(this.#dir));
      this.#openWatch(this.#dir, id, true);
      this.#watcherStartedAt = Date.now();
      this.#watchedDirId = id;
      return true;
    } catch (err) {
      // While DIR is gone this fails until it is back; that was reported once already.
      const level = this.#dirMissing ? 'debug' : 'warn';
      this.#log[level]({ dir: this.#dir, err: errorMessage(err) }, 'cannot watch the manifest directory; retrying');
      this.#scheduleWatchRestart();
      return false;
    }
  }

  /** Starts a non-recursive watch of `dir` (throws when `fs.watch` does). */
  #openWatch(dir: string, id: string, tree: boolean): void {
    const w = watch(dir, (_event, name) => this.#onEvent(dir, w, name));
    w.on('error', (err) => this.#onWatchError(w, err));
    this.#watches.set(dir, { watcher: w, id, tree });
  }

  /** Starts watching `dir` unless it already is; a failure is reported once and left to the rescan. */
  #tryOpenWatch(dir: string, id: string, tree: boolean): void {
    try {
      this.#openWatch(dir, id, tree);
      this.#unwatchable.delete(dir);
    } catch (err) {
      const level = this.#unwatchable.has(dir) ? 'debug' : 'warn';
      this.#unwatchable.add(dir);
      this.#log[level]({ dir, err: errorMessage(err) }, 'cannot watch a directory; its changes are seen at the periodic rescan');
    }
  }

  #closeWatch(dir: string): void {
    const w = this.#watches.get(dir);
    if (w === undefined) return;
    this.#watches.delete(dir);
    try {
      w.watcher.close();
    } catch (err) {
      this.#log.debug({ dir, err: errorMessage(err) }, 'closing a directory watch failed');
    }
  }

  #closeWatcher(): void {
    for (const dir of [...this.#watches.keys()]) this.#closeWatch(dir);
  }

  /** Whether the tree is being watched (scans then add the directories they list). */
  #isTreeWatched(): boolean {
    return this.#useWatch && this.#watches.has(this.#dir);
  }

  /** Watches directory `d` of the tree (found by a scan), replacing a watch of an earlier directory at that path. */
  #watchTreeDir(d: string): void {
    let id: string;
    try {
      id = statId(lstatSync(d));
    } catch {
      return; // gone again: its parent's watch reports that
    }
    const cur = this.#watches.get(d);
    if (cur !== undefined && cur.id === id) {
      cur.tree = true;
      return;
    }
    // A directory removed and made again between two looks: the old watch is on the removed one.
    if (cur !== undefined) this.#closeWatch(d);
    this.#tryOpenWatch(d, id, true);
  }

  /** Drops from the tree the watched directories at or below `root` that its scan did not list. */
  #pruneTree(root: string, listed: ReadonlySet<string>): void {
    let pruned = false;
    for (const [dir, w] of this.#watches) {
      if (dir === this.#dir || !w.tree || listed.has(dir) || (dir !== root && !dir.startsWith(root + sep))) continue;
      // Kept only while a symlink's target is there: #syncLinkWatches decides.
      w.tree = false;
      pruned = true;
    }
    if (pruned) this.#syncLinkWatches();
  }

  /**
   * Watches the directories holding the targets of symlinked files (an edit of a target changes
   * no name in DIR), and stops watching those no longer needed.
   */
  #syncLinkWatches(): void {
    const needed = new Set<string>();
    for (const target of this.#links.values()) needed.add(dirname(target));
    for (const [dir, w] of [...this.#watches]) if (!w.tree && !needed.has(dir)) this.#closeWatch(dir);
    if (!this.#isTreeWatched()) return;
    for (const dir of needed) {
      const cur = this.#watches.get(dir);
      if (cur?.tree === true) continue; // kept current by the scans
      let id: string;
      try {
        id = statId(statSync(dir));
      } catch {
        this.#closeWatch(dir); // its parent is not watched: the rescan sees it come back
        continue;
      }
      if (cur?.id === id) continue;
      this.#closeWatch(dir);
      this.#tryOpenWatch(dir, id, false);
    }
  }

  /** Records where the symlinked files at or below `root` point now; true when that changed. */
  #updateLinks(root: string, scan: Scan): boolean {
    let changed = false;
    for (const link of [...this.#links.keys()]) {
      if ((link === root || link.startsWith(root + sep)) && !scan.links.has(link)) changed = this.#links.delete(link) || changed;
    }
    for (const link of scan.links) {
      const target = linkTarget(link);
      if (target === this.#links.get(link)) continue;
      if (target === undefined) this.#links.delete(link);
      else this.#links.set(link, target);
      changed = true;
    }
    if (changed) this.#linksByTarget = undefined;
    return changed;
  }

  #linksTo(target: string): readonly string[] {
    if (this.#links.size === 0) return [];
    if (this.#linksByTarget === undefined) {
      this.#linksByTarget = new Map();
      for (const [link, t] of this.#links) {
        const list = this.#linksByTarget.get(t);
        if (list === undefined) this.#linksByTarget.set(t, [link]);
        else list.push(link);
      }
    }
    return this.#linksByTarget.get(target) ?? [];
  }

  #isCurrentWatch(w: FSWatcher): boolean {
    for (const x of this.#watches.values()) if (x.watcher === w) return true;
    return false;
  }

  #onWatchError(w: FSWatcher, err: unknown): void {
    if (!this.#isCurrentWatch(w)) return;
    // Back off only from a watcher that keeps failing; one that ran for a while starts over.
    if (Date.now() - this.#watcherStartedAt > WATCHER_STABLE_MS) this.#restartBackoff.reset();
    const level = this.#restartBackoff.attempt === 0 ? 'warn' : 'debug';
    this.#log[level]({ dir: this.#dir, err: errorMessage(err) }, 'the directory watcher failed; restarting it (the rescan covers meanwhile)');
    this.#closeWatcher();
    this.#scheduleWatchRestart();
  }

  #scheduleWatchRestart(): void {
    if (this.#stopped || !this.#useWatch || this.#restartTimer !== undefined) return;
    this.#restartTimer = setTimeout(() => {
      this.#restartTimer = undefined;
      if (this.#stopped || this.#watches.has(this.#dir)) return;
      // Events were missed while no watcher ran.
      if (this.#startWatcher()) this.rescan();
    }, this.#restartBackoff.next());
    this.#restartTimer.unref();
  }

  #onEvent(dir: string, w: FSWatcher, name: string | Buffer | null): void {
    const watched = this.#watches.get(dir);
    if (this.#stopped || watched?.watcher !== w) return;
    const p = this.#pending;
    if (name === null) {
      p.full = true;
    } else if (dir !== this.#dir && name.toString() === basename(dir)) {
      // Most likely about `dir` itself (removed or moved: the event then carries its own name), and
      // its watch is dead even if a directory is made there again, often with the same inode
      // number. Watch it anew: the scan of `dir` does (a child of the same name is read by it too).
      this.#closeWatch(dir);
      if (watched.tree) this.#addPending(relative(this.#dir, dir));
      else p.full = true;
    } else {
      const abs = join(dir, name.toString());
      const links = this.#linksTo(abs);
      // A target directory's other names are none of our business.
      if (!watched.tree && links.length === 0) return;
      if (watched.tree) this.#addPending(relative(this.#dir, abs));
      for (const link of links) this.#addPending(relative(this.#dir, link));
    }
    p.startedAtMs ??= Date.now();
    this.#schedule();
  }

  #addPending(rel: string): void {
    const p = this.#pending;
    // An event on the directory itself or on an ignored path (a ConfigMap mount swaps its hidden
    // `..data` link) may change any file: compare all fingerprints.
    if (rel === '' || rel.split(/[\\/]/).some(isIgnoredName)) p.full = true;
    else if (p.paths.size >= MAX_PENDING_PATHS) p.full = true;
    else p.paths.add(rel);
  }

  #schedule(): void {
    if (this.#stopped) return;
    this.#batchTimer.arm(this.#pending.startedAtMs);
  }

  #flush(): void {
    if (this.#stopped) return;
    if (this.#running) {
      // Re-entered from a sink or onChange callback: run after the current batch.
      this.#schedule();
      return;
    }
    this.#batchTimer.cancel();
    const batch = this.#pending;
    this.#pending = { full: false, paths: new Set(), startedAtMs: undefined };
    if (!batch.full && batch.paths.size === 0) return;
    try {
      this.#runBatch(batch, false);
    } catch (err) {
      // A bug, not bad input: keep serving what is loaded; the next rescan tries again.
      this.#log.error({ dir: this.#dir, err: errorMessage(err) }, 'applying manifest changes failed');
    }
  }

  #dirId(): string | undefined {
    try {
      const s = statSync(this.#dir);
      return `${s.dev}:${s.ino}`;
    } catch {
      return undefined;
    }
  }

  // === scanning ===

  /**
   * Lists the candidate files at or below `root` (symlinked files followed, symlinked directories
   * not). While the tree is watched, each directory is watched before it is listed (a file made
   * meanwhile is then either listed or reported), and watches of directories gone from below
   * `root` are dropped.
   */
  #scan(root: string): Scan {
    const listed = this.#isTreeWatched() ? new Set<string>() : undefined;
    const scan = this.#list(root, listed);
    if (listed !== undefined) this.#pruneTree(root, scan.missing ? new Set() : listed);
    return scan;
  }

  #list(root: string, listed: Set<string> | undefined): Scan {
    const files = new Map<string, string>();
    const links = new Set<string>();
    const unreadable: string[] = [];
    let st: Stats;
    try {
      st = root === this.#dir ? statSync(root) : lstatSync(root);
    } catch (err) {
      if (errnoOf(err) === 'ENOENT' || errnoOf(err) === 'ENOTDIR') return { files, links, unreadable, missing: true };
      unreadable.push(root);
      return { files, links, unreadable, missing: false };
    }
    const candidate = (p: string, isLink: boolean): void => {
      if (isLink && this.#isDirectoryLink(p)) return;
      files.set(p, fingerprintOf(p));
      if (isLink) links.add(p);
    };
    if (!st.isDirectory()) {
      if (MANIFEST_FILE.test(root)) candidate(root, st.isSymbolicLink());
      return { files, links, unreadable, missing: false };
    }
    const stack = [root];
    for (let d = stack.pop(); d !== undefined; d = stack.pop()) {
      if (listed !== undefined) {
        listed.add(d);
        if (d !== this.#dir) this.#watchTreeDir(d);
      }
      let entries: Dirent[];
      try {
        entries = readdirSync(d, { withFileTypes: true });
      } catch (err) {
        if (d === root && errnoOf(err) === 'ENOENT') return { files, links, unreadable, missing: true };
        if (errnoOf(err) !== 'ENOENT') unreadable.push(d);
        continue;
      }
      for (const e of entries) {
        if (isIgnoredName(e.name)) continue;
        const p = join(d, e.name);
        if (e.isDirectory()) stack.push(p);
        else if (MANIFEST_FILE.test(e.name)) candidate(p, e.isSymbolicLink());
      }
    }
    return { files, links, unreadable, missing: false };
  }

  #isLink(p: string): boolean {
    try {
      return lstatSync(p).isSymbolicLink();
    } catch {
      return false;
    }
  }

  #isDirectoryLink(p: string): boolean {
    try {
      return statSync(p).isDirectory();
    } catch {
      return false; // dangling or looping: reported when read
    }
  }

  /** Reads a file without ever blocking on a FIFO or reading a huge file. */
  #read(file: string): ReadResult {
    let fd: number;
    try {
      fd = openSync(file, constants.O_RDONLY | constants.O_NONBLOCK);
    } catch (err) {
      const code = errnoOf(err);
      // A dangling symbolic link is a broken file, not a removed one.
      const missing = (code === 'ENOENT' || code === 'ENOTDIR') && !this.#isLink(file);
      return { ok: false, missing, detail: errorMessage(err) };
    }
    try {
      const st = fstatSync(fd);
      if (st.isDirectory()) return { ok: false, missing: true, detail: 'is a directory' };
      if (!st.isFile()) return { ok: false, missing: false, detail: 'not a regular file' };
      if (st.size > this.#maxFileBytes) return { ok: false, missing: false, detail: `larger than ${this.#maxFileBytes} bytes (${st.size})` };
      const buf = readFileSync(fd);
      if (buf.length > this.#maxFileBytes) return { ok: false, missing: false, detail: `larger than ${this.#maxFileBytes} bytes` };
      return { ok: true, text: buf.toString('utf8'), hash: createHash('sha256').update(buf).digest('hex') };
    } catch (err) {
      return { ok: false, missing: false, detail: errorMessage(err) };
    } finally {
      try {
        closeSync(fd);
      } catch {
        // nothing to do
      }
    }
  }

  // === batches ===

  #runBatch(batch: Pending, initial: boolean): void {
    this.#running = true;
    try {
      this.#runBatchInner(batch, initial);
    } finally {
      this.#running = false;
    }
  }

  #runBatchInner(batch: Pending, initial: boolean): void {
    const startedAtMs = batch.startedAtMs ?? Date.now();
    /** Files to read again (an event named them, or their fingerprint changed), with their fingerprint. */
    const toRead = new Map<string, string>();
    const removed = new Set<string>();
    let linksChanged = false;
    const diffScope = (root: string, scan: Scan, named: boolean): void => {
      linksChanged = this.#updateLinks(root, scan) || linksChanged;
      for (const [file, fingerprint] of scan.files) {
        // Named by an event: read even with an unchanged fingerprint (the content hash decides).
        if (named || this.#files.get(file)?.fingerprint !== fingerprint) toRead.set(file, fingerprint);
      }
      const under = (f: string, dir: string) => f === dir || f.startsWith(dir + sep);
      for (const file of this.#files.keys()) {
        if (!under(file, root) || scan.files.has(file) || toRead.has(file)) continue;
        if (scan.unreadable.some((d) => under(file, d))) continue;
        removed.add(file);
      }
    };

    // Files vanish one by one before their directory does: while DIR is gone nothing counts as
    // removed, and a DIR that comes back gets a moment to fill before it is read.
    const dirId = this.#dirId();
    if (dirId === undefined) {
      this.#dirGone();
      return;
    }
    if (this.#dirMissing) {
      if (this.#settleTimer === undefined) {
        this.#log.info({ dir: this.#dir }, 'the manifest directory is back; reloading it shortly');
        this.#settleTimer = setTimeout(() => {
          this.#settleTimer = undefined;
          this.#dirMissing = false;
          this.rescan();
        }, this.#maxDelayMs);
        this.#settleTimer.unref();
      }
      return;
    }
    if (this.#useWatch && (!this.#watches.has(this.#dir) || this.#watchedDirId !== dirId) && this.#restartTimer === undefined) {
      // DIR was replaced (or the watcher died): watch the new one, and look at everything.
      this.#startWatcher();
      batch.full = true;
    }
    if (batch.full) diffScope(this.#dir, this.#scan(this.#dir), false);
    for (const rel of batch.paths) {
      const abs = join(this.#dir, rel);
      if (abs !== this.#dir && !abs.startsWith(this.#dir + sep)) continue;
      diffScope(abs, this.#scan(abs), true);
    }
    // A full batch also looks again at the targets' directories (one removed and made again).
    if (linksChanged || batch.full) this.#syncLinkWatches();

    const now = Date.now();
    const touched: string[] = [];
    for (const file of [...toRead.keys()].sort()) {
      const outcome = this.#load(file, toRead.get(file) as string, now);
      if (outcome === 'removed') removed.add(file);
      else if (outcome === 'changed') touched.push(file);
    }
    for (const file of removed) {
      if (!this.#files.delete(file)) continue;
      this.#log.info({ file }, 'manifest file removed');
      touched.push(file);
    }
    // A batch the sink failed to apply is retried with the next one (the rescan at the latest).
    if (touched.length === 0 && !initial && !this.#sinkFailed) return;
    this.#reconcile(startedAtMs, touched.sort());
  }

  #dirGone(): void {
    if (!this.#dirMissing) {
      this.#dirMissing = true;
      this.#log.warn({ dir: this.#dir }, 'the manifest directory is gone; keeping what was loaded from it until it comes back');
    }
    this.#closeWatcher();
    this.#scheduleWatchRestart();
  }

  /** Looks at the files that turned empty again once their grace period is over. */
  #recheckEmptyLater(): void {
    if (this.#emptyTimer !== undefined || this.#stopped) return;
    this.#emptyTimer = setTimeout(() => {
      this.#emptyTimer = undefined;
      if (this.#stopped) return;
      for (const file of this.#emptySince.keys()) this.#pending.paths.add(relative(this.#dir, file));
      this.#pending.startedAtMs ??= Date.now();
      this.#flush();
    }, EMPTY_FILE_GRACE_MS + 10);
    this.#emptyTimer.unref();
  }

  /**
   * Reads and processes one file. 'same' when its content did not change, 'removed' when it is
   * gone (or became a directory), 'changed' when its objects or status may have changed.
   */
  #load(file: string, fingerprint: string, now: number): 'same' | 'removed' | 'changed' {
    const read = this.#read(file);
    if (!read.ok && read.missing) {
      this.#emptySince.delete(file);
      return 'removed';
    }
    const prev = this.#files.get(file);
    // A file that defined objects and is now empty is most often being rewritten (truncate, then
    // write): applying the empty version would withdraw its policy for a moment. Wait a little
    // for the content; a file still empty after the grace period really was emptied.
    if (read.ok && read.text.trim() === '' && prev !== undefined && prev.defs.size > 0) {
      const since = this.#emptySince.get(file);
      if (since === undefined || now - since < EMPTY_FILE_GRACE_MS) {
        if (since === undefined) this.#emptySince.set(file, now);
        this.#recheckEmptyLater();
        return 'same';
      }
    }
    this.#emptySince.delete(file);
    const version = read.ok ? `sha256:${read.hash}` : `error:${read.detail}`;
    if (prev !== undefined && prev.version === version) {
      prev.fingerprint = fingerprint;
      return 'same';
    }
    const state: FileState = prev ?? {
      file,
      fingerprint,
      version,
      defs: new Map(),
      retained: new Set(),
      diagnostics: [],
      ok: true,
      lastGoodAt: undefined,
      lastErrorAt: undefined,
    };
    state.fingerprint = fingerprint;
    state.version = version;
    const wasOk = prev?.ok ?? true;
    if (!read.ok) {
      // Unreadable: everything it defined stays.
      state.diagnostics = [diagnostic('POL003', { path: file, detail: read.detail }, { source: { file, line: 0, col: 0 } })];
      state.retained = new Set(state.defs.keys());
    } else {
      this.#process(state, read.text);
    }
    state.ok = !state.diagnostics.some(isError);
    if (state.ok) state.lastGoodAt = now;
    else state.lastErrorAt = now;
    this.#files.set(file, state);
    if (!state.ok) {
      const errors = state.diagnostics.filter(isError);
      this.#log.warn(
        {
          file,
          errors: errors.length,
          retained: [...state.retained],
          diagnostics: state.diagnostics.map(formatDiagnostic),
        },
        state.retained.size > 0 ? 'manifest file has errors; its last good objects stay in force' : 'manifest file has errors',
      );
    } else if (!wasOk) {
      this.#log.info({ file }, 'manifest file is valid again');
    } else {
      this.#log.debug({ file, objects: state.defs.size }, 'manifest file loaded');
    }
    return 'changed';
  }

  /** Runs the admission pipeline on a file's new text and decides which objects it defines now. */
  #process(state: FileState, text: string): void {
    const prevDefs = state.defs;
    const parsed = parseManifestText(text, state.file);
    const admission = admitDocuments(parsed.documents);
    const diagnostics = [...parsed.diagnostics, ...admission.diagnostics];
    // A syntax error hides which objects the broken part defined: keep all previous ones.
    let keepAll = parsed.diagnostics.some((d) => d.code === 'POL001');
    const defs = new Map<string, Resource>();
    const retained = new Set<string>();
    for (const doc of admission.documents) {
      if (doc.resource !== undefined) {
        const k = resourceKeyString(resourceKeyOf(doc.resource));
        const earlier = defs.get(k);
        if (earlier !== undefined && !retained.has(k)) diagnostics.push(duplicateDiagnostic(earlier, doc.resource));
        const prev = prevDefs.get(k);
        // Unchanged objects keep their identity, so they are not applied again.
        defs.set(k, prev !== undefined && sameContent(prev, doc.resource) ? prev : doc.resource);
        retained.delete(k);
        continue;
      }
      if (doc.entry === undefined) continue; // a kind ward does not read
      // Did not decode, or admission rejected it: the last good version stays.
      if (doc.key === undefined) {
        keepAll = true;
        continue;
      }
      const k = resourceKeyString(doc.key);
      if (defs.has(k)) continue;
      const prev = prevDefs.get(k);
      if (prev !== undefined) {
        defs.set(k, prev);
        retained.add(k);
      }
    }
    if (keepAll) {
      for (const [k, r] of prevDefs) {
        if (defs.has(k)) continue;
        defs.set(k, r);
        retained.add(k);
      }
    }
    state.defs = defs;
    state.retained = retained;
    state.diagnostics = diagnostics;
  }

  /** Merges all files, builds and injects pods, and applies the difference to the sink. */
  #reconcile(startedAtMs: number, files: string[]): void {
    // The last file in path order wins each object.
    const winners = new Map<string, { file: string; resource: Resource }>();
    const duplicates = new Map<string, Diagnostic[]>();
    for (const file of [...this.#files.keys()].sort()) {
      for (const [k, resource] of (this.#files.get(file) as FileState).defs) {
        const prev = winners.get(k);
        if (prev !== undefined) {
          const list = duplicates.get(prev.file) ?? [];
          list.push(duplicateDiagnostic(prev.resource, resource));
          duplicates.set(prev.file, list);
          winners.delete(k); // re-insert: keep the map in winning order
        }
        winners.set(k, { file, resource });
      }
    }
    for (const [file, list] of duplicates) {
      if (!deepEqual(this.#duplicates.get(file)?.map(formatDiagnostic), list.map(formatDiagnostic))) {
        this.#log.warn({ file, diagnostics: list.map(formatDiagnostic) }, 'objects defined in several files; the last file in path order wins');
      }
    }
    this.#duplicates = duplicates;

    // Pods: their own definitions, then those of workloads (later wins, as in `ward check`).
    const namespaces = new Map<string, Namespace>();
    const written = new Map<string, Pod>();
    const workloads: Resource[] = [];
    for (const [k, { resource }] of winners) {
      if (resource.kind === 'Namespace') namespaces.set(resource.metadata.name, resource);
      else if (resource.kind === 'Pod') written.set(k, resource);
      else if (isWorkload(resource)) workloads.push(resource);
    }
    for (const w of workloads) {
      let pods = this.#expanded.get(w);
      if (pods === undefined) {
        pods = expandWorkloads([w], { podNames: this.#podNames });
        this.#expanded.set(w, pods);
      }
      for (const p of pods) written.set(resourceKeyString(resourceKeyOf(p)), p);
    }
    // Injection happens once, at creation: a pod keeps it until its own definition changes.
    const pods = new Map<string, PodRecord>();
    for (const [k, p] of written) {
      const prev = this.#pods.get(k);
      if (prev !== undefined && sameContent(prev.written, p)) pods.set(k, prev);
      else pods.set(k, { written: p, created: injectPod(p, namespaces.get(p.metadata.namespace), this.#inject) });
    }
    this.#pods = pods;

    const desired = new Map<string, Resource>();
    for (const [k, { resource }] of winners) if (resource.kind !== 'Pod') desired.set(k, resource);
    for (const [k, rec] of pods) desired.set(k, rec.created);
    const applies: Resource[] = [];
    const deletes: ResourceKey[] = [];
    for (const [k, r] of desired) if (this.#applied.get(k) !== r) applies.push(r);
    for (const [k, r] of this.#applied) if (!desired.has(k)) deletes.push(resourceKeyOf(r));
    // Set before the sink runs, so a sink that measures propagation sees this batch's start.
    this.#lastChangeStartedAt = startedAtMs;
    if (applies.length + deletes.length > 0) {
      try {
        this.#sink.update((tx) => {
          for (const k of deletes) tx.delete(k);
          for (const r of applies) tx.apply(r);
        });
      } catch (err) {
        // Keep what the sink last accepted, so the next batch computes the same changes again.
        this.#sinkFailed = true;
        this.#log.error({ dir: this.#dir, err: errorMessage(err) }, 'the sink failed to apply manifest changes; retrying with the next batch');
        return;
      }
    }
    this.#applied = desired;
    this.#sinkFailed = false;
    this.#log.debug({ applied: applies.length, deleted: deletes.length, files, latencyMs: Date.now() - startedAtMs }, 'manifest changes applied');
    if (this.#onChange !== undefined) {
      try {
        this.#onChange({ applied: applies.length, deleted: deletes.length, files, startedAtMs });
      } catch (err) {
        this.#log.error({ err: errorMessage(err) }, 'the directory source change callback failed');
      }
    }
  }
}

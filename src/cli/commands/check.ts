/**
 * `ward check`: validates every resource like the admission webhook and lints the set for traps.
 */
import type { Diagnostic } from '../../core/index.js';
import { type CliIo, EXIT } from '../io.js';
import { countSeverities, formatDiagnostics, json, palette } from '../output.js';
import type { Workspace } from '../workspace.js';

function sameResource(d: Diagnostic, e: { kind: string; namespace: string; name: string }): boolean {
  const r = d.resource;
  return r !== undefined && r.kind === e.kind && (r.namespace ?? '') === e.namespace && r.name === e.name;
}

/** Exit status for a workspace's diagnostics: 2 for unreadable input, 1 for errors. */
export function statusOf(diagnostics: readonly Diagnostic[]): number {
  if (diagnostics.some((d) => d.code === 'POL003' || d.code === 'POL007')) return EXIT.usage;
  return diagnostics.some((d) => d.severity === 'error') ? EXIT.failed : EXIT.ok;
}

/** Runs `ward check` on a built workspace. */
export function runCheck(ws: Workspace, output: string, io: CliIo): number {
  const entries = ws.entries.map((e) => {
    const extra = ws.diagnostics.filter((d) => sameResource(d, e) && !e.diagnostics.includes(d));
    return {
      kind: e.kind,
      apiVersion: e.apiVersion,
      namespace: e.namespace,
      name: e.name,
      source: e.source,
      admitted: e.admitted,
      diagnostics: [...e.diagnostics, ...extra],
    };
  });
  if (output === 'json') {
    io.out(json({ resources: entries, diagnostics: ws.diagnostics }));
    return statusOf(ws.diagnostics);
  }
  const p = palette(io.color);
  io.out(formatDiagnostics(ws.diagnostics, p));
  const { errors, warnings } = countSeverities(ws.diagnostics);
  const rejected = entries.filter((e) => !e.admitted).length;
  const mark = errors > 0 ? p.red('✖') : p.green('✔');
  const rej = rejected > 0 ? `, ${rejected} would be rejected by admission` : '';
  io.out(`${mark} ${entries.length} resources checked${rej}: ${errors} errors, ${warnings} warnings\n`);
  return statusOf(ws.diagnostics);
}

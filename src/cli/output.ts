/**
 * Output helpers: borderless aligned tables (kubectl style), colour only on a terminal,
 * compiler-style diagnostics.
 */
import { stripVTControlCharacters } from 'node:util';
import pc from 'picocolors';
import { compareDiagnostics, type Diagnostic } from '../core/index.js';

/** Colour functions that are identity when colour is off. */
export interface Palette {
  red(s: string): string;
  green(s: string): string;
  yellow(s: string): string;
  cyan(s: string): string;
  dim(s: string): string;
  bold(s: string): string;
}

/** The palette for a terminal (or none). */
export function palette(color: boolean): Palette {
  const c = pc.createColors(color);
  return { red: c.red, green: c.green, yellow: c.yellow, cyan: c.cyan, dim: c.dim, bold: c.bold };
}

/** Renders rows as columns separated by three spaces; the first row is the header. */
export function table(rows: readonly (readonly string[])[]): string {
  if (rows.length === 0) return '';
  const widths: number[] = [];
  for (const row of rows) {
    row.forEach((cell, i) => {
      widths[i] = Math.max(widths[i] ?? 0, stripVTControlCharacters(cell).length);
    });
  }
  return `${rows
    .map((row) =>
      row
        .map((cell, i) => (i === row.length - 1 ? cell : cell + ' '.repeat((widths[i] as number) - stripVTControlCharacters(cell).length)))
        .join('   ')
        .trimEnd(),
    )
    .join('\n')}\n`;
}

/** `file:line:col: severity CODE message` plus an indented hint line. */
export function formatDiagnostic(d: Diagnostic, p: Palette): string {
  const where = d.source === undefined ? '' : d.source.line > 0 ? `${d.source.file}:${d.source.line}:${d.source.col}: ` : `${d.source.file}: `;
  const sev = d.severity === 'error' ? p.red('error') : d.severity === 'warning' ? p.yellow('warning') : p.cyan('info');
  const res = d.resource !== undefined ? ` [${d.resource.kind} ${d.resource.namespace ? `${d.resource.namespace}/` : ''}${d.resource.name}]` : '';
  const hint = d.hint !== undefined ? `\n  ${p.dim(`hint: ${d.hint}`)}` : '';
  return `${where}${sev} ${p.bold(d.code)} ${d.message}${p.dim(res)}${hint}\n`;
}

/** Sorted, formatted diagnostics. */
export function formatDiagnostics(ds: readonly Diagnostic[], p: Palette): string {
  return [...ds]
    .sort(compareDiagnostics)
    .map((d) => formatDiagnostic(d, p))
    .join('');
}

/** Counts diagnostics by severity. */
export function countSeverities(ds: readonly Diagnostic[]): { errors: number; warnings: number; infos: number } {
  let errors = 0;
  let warnings = 0;
  let infos = 0;
  for (const d of ds) {
    if (d.severity === 'error') errors++;
    else if (d.severity === 'warning') warnings++;
    else infos++;
  }
  return { errors, warnings, infos };
}

/** Pretty JSON with a trailing newline. */
export function json(value: unknown): string {
  return `${JSON.stringify(value, null, 2)}\n`;
}

/**
 * `ward explain`: one connection or request, with the verdict and the whole decision chain.
 */

import { type ExplainRequest, type ExplainResult, explainRequest } from '../../index/index.js';
import { type CliIo, EXIT } from '../io.js';
import { json, palette } from '../output.js';
import type { Workspace } from '../workspace.js';

/** Options of `ward explain`. */
export interface ExplainOptions extends ExplainRequest {
  readonly output: string;
}

/** Renders an explain result for people. */
export function formatExplain(r: ExplainResult, color: boolean): string {
  const c = palette(color);
  const verdict = r.decision === 'allow' ? c.green('ALLOW') : r.decision === 'audit-allow' ? c.yellow('AUDIT-ALLOW') : c.red(`DENY (${r.denyKind})`);
  const width = Math.max(...r.chain.map((s) => s.step.length));
  const lines = r.chain.map((s) => `  ${c.dim(s.step.padEnd(width))}  ${s.detail}`);
  return `${verdict}  level ${r.level}, ${r.server.kind}/${r.server.name}${r.route ? `, route ${r.route.kind}/${r.route.name}` : ''}${r.authz ? `, authz ${r.authz.kind}/${r.authz.name}` : ''}\n${lines.join('\n')}\n`;
}

/** Runs `ward explain`. */
export function runExplain(ws: Workspace, o: ExplainOptions, io: CliIo): number {
  return printExplain(explainRequest(ws, o), o.output, io);
}

/** Prints an explain result (computed here or by a controller). */
export function printExplain(result: ExplainResult, output: string, io: CliIo): number {
  io.out(output === 'json' ? json(result) : formatExplain(result, io.color));
  return EXIT.ok;
}

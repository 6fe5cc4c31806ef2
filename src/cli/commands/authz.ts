/**
 * `ward authz`: the effective inbound policy of every pod and port of a resource.
 */
import { authzView, type PodView } from '../../index/index.js';
import { type CliIo, EXIT } from '../io.js';
import { json, palette, table } from '../output.js';
import type { Workspace } from '../workspace.js';

/** Runs `ward authz`. `namespace` undefined means all namespaces (`-A`). */
export function runAuthz(ws: Workspace, resource: string, namespace: string | undefined, output: string, io: CliIo): number {
  return printAuthz(authzView(ws, resource, namespace), output, io);
}

/** Prints an authz view (computed here or by a controller). */
export function printAuthz(result: { readonly pods: readonly PodView[] }, output: string, io: CliIo): number {
  const view = result.pods;
  if (output === 'json') {
    io.out(json({ pods: view }));
    return EXIT.ok;
  }
  const c = palette(io.color);
  const rows: string[][] = [['POD', 'PORT', 'SERVER', 'PROTOCOL', 'ROUTE', 'AUTHORIZATION', 'ADMITS'].map(c.bold)];
  for (const pod of view) {
    let first = true;
    for (const port of pod.ports) {
      const lead = () => {
        const cells = [first ? `${pod.namespace}/${pod.name}` : '', String(port.port), `${port.server.kind}/${port.server.name}`, port.protocol];
        first = false;
        return cells;
      };
      let leadCells: string[] | undefined = lead();
      const row = (route: string, authz: string, admits: string) => {
        rows.push([...(leadCells ?? ['', '', '', '']), route, authz, admits]);
        leadCells = undefined;
      };
      for (const a of port.authorizations) {
        const name = `${a.kind}/${a.name}`;
        row('*', a.name === 'localhost' && a.kind === 'default' ? c.dim(name) : name, a.admits);
      }
      for (const r of port.routes) {
        const rn = `${r.kind}/${r.name}`;
        if (r.authorizations.length === 0) row(rn, c.dim('(server authorizations)'), '');
        for (const a of r.authorizations) row(rn, `${a.kind}/${a.name}`, a.admits);
      }
      if (port.authorizations.length === 1 && port.routes.every((r) => r.authorizations.length === 0)) {
        row('', c.red('(nothing else: denied)'), '');
      }
    }
  }
  io.out(table(rows));
  return EXIT.ok;
}

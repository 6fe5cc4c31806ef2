/**
 * `ward authz`: the effective inbound policy of every pod and port of a resource, or, for a
 * policy object (`server/NAME`, `authorizationpolicy/NAME`, …), the pods, ports and routes it
 * applies to and through what.
 */
import { type AuthzResult, authzView, type PolicyTargetsResult, type WorkloadAuthz } from '../../index/index.js';
import { type CliIo, EXIT } from '../io.js';
import { json, palette, table } from '../output.js';
import type { Workspace } from '../workspace.js';

/** Runs `ward authz`. `namespace` undefined means all namespaces (`-A`). */
export function runAuthz(ws: Workspace, resource: string, namespace: string | undefined, output: string, io: CliIo): number {
  return printAuthz(authzView(ws, resource, namespace), output, io);
}

/** Prints an authz view (computed here or by a controller). */
export function printAuthz(result: AuthzResult, output: string, io: CliIo): number {
  if ('policies' in result) return printPolicyTargets(result, output, io);
  return printWorkloadAuthz(result, output, io);
}

/** Prints where policy objects apply: a heading per object, then its pods and ports. */
export function printPolicyTargets(result: PolicyTargetsResult, output: string, io: CliIo): number {
  if (output === 'json') {
    io.out(json({ policies: result.policies }));
    return EXIT.ok;
  }
  const c = palette(io.color);
  result.policies.forEach((o, i) => {
    if (i > 0) io.out('\n');
    io.out(`${c.bold(`${o.kind} ${o.namespace}/${o.name}`)}: ${o.summary}\n`);
    if (o.usedBy.length > 0) {
      const smi = o.kind === 'HTTPRouteGroup' || o.kind === 'TCPRoute' || o.kind === 'UDPRoute';
      io.out(`  ${smi ? 'named by TrafficTarget' : 'required by AuthorizationPolicy'} ${o.usedBy.join(', ')}\n`);
    }
    if (o.kind === 'Server') {
      io.out(`  authorized by ${o.authorizations.length === 0 ? c.red('nothing (only route authorizations admit requests)') : o.authorizations.join(', ')}\n`);
    } else if ((o.kind === 'HTTPRoute' || o.kind === 'GRPCRoute') && o.authorizations.length > 0) {
      io.out(`  authorized by ${o.authorizations.join(', ')} (and the Server's authorizations)\n`);
    }
    if (o.appliesTo.length > 0) {
      const rows: string[][] = [['POD', 'WORKLOAD', 'PORT', 'SERVER', 'ROUTE', 'VIA'].map(c.bold)];
      for (const r of o.appliesTo) {
        const via = r.active ? r.via : c.yellow(`${r.via} (not applied: ${r.note ?? 'inactive'})`);
        rows.push([
          `${r.namespace}/${r.pod}`,
          r.workload ?? c.dim('-'),
          r.port === null ? c.dim('-') : String(r.port),
          r.server ?? c.dim('-'),
          r.route ?? c.dim('*'),
          via,
        ]);
      }
      io.out(table(rows).replace(/^/gm, '  ').replace(/ +$/, ''));
    } else {
      io.out(`  ${c.yellow('applies to no pod port')}\n`);
    }
    for (const n of o.notes) io.out(`  ${c.dim(`note: ${n}`)}\n`);
  });
  return EXIT.ok;
}

/** Prints the policy of a workload's pods, port by port. */
export function printWorkloadAuthz(result: WorkloadAuthz, output: string, io: CliIo): number {
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

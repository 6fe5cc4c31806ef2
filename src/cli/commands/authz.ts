/**
 * `ward authz`: the effective inbound policy of every pod and port of a resource.
 */
import { type Authorization, compileAuthz, describeAuthz, type GrpcRoute, type HttpRoute, type InboundServer, LOCALHOST_AUTHZ } from '../../core/index.js';
import { type CliIo, EXIT, UsageError } from '../io.js';
import { json, palette, table } from '../output.js';
import { parseResourceArg, podsOf } from '../target.js';
import type { Workspace } from '../workspace.js';

const PROTOCOLS: Record<InboundServer['protocol']['kind'], string> = {
  detect: 'detect',
  http1: 'HTTP/1',
  http2: 'HTTP/2',
  grpc: 'gRPC',
  opaque: 'opaque',
  tls: 'TLS',
};

function authzJson(a: Authorization) {
  const authn = a.authentication;
  return {
    group: a.meta.group,
    kind: a.meta.kind,
    name: a.meta.name,
    networks: a.networks.map((n) => ({ cidr: `${n.net.ip}/${n.net.prefixLen}`, except: n.except.map((e) => `${e.ip}/${e.prefixLen}`) })),
    authentication:
      authn.kind === 'tlsAuthenticated'
        ? { kind: authn.kind, identities: authn.identities, suffixes: authn.suffixes.map((s) => (s.length === 0 ? '*' : `*.${s.join('.')}`)) }
        : { kind: authn.kind },
    admits: describeAuthz(compileAuthz(a)),
  };
}

function routesOf(s: InboundServer): readonly (HttpRoute | GrpcRoute)[] {
  const p = s.protocol;
  if (p.kind === 'detect') return p.httpRoutes;
  if (p.kind === 'http1' || p.kind === 'http2' || p.kind === 'grpc') return p.routes;
  return [];
}

/** Runs `ward authz`. `namespace` undefined means all namespaces (`-A`). */
export function runAuthz(ws: Workspace, resource: string, namespace: string | undefined, output: string, io: CliIo): number {
  const arg = parseResourceArg(resource);
  const pods = podsOf(ws, arg, namespace);
  if (pods.length === 0) throw new UsageError(`no meshed pods found for ${resource}${namespace ? ` in namespace ${namespace}` : ''}`);
  const view = pods.map((p) => ({
    namespace: p.namespace,
    name: p.name,
    serviceAccount: p.serviceAccount,
    ports: ws.index.ports(p.namespace, p.name).map((port) => {
      const s = (ws.index.lookup(p.namespace, p.name, port) as { value: InboundServer }).value;
      return {
        port,
        server: { kind: s.meta.kind === 'default' ? 'default' : 'server', name: s.meta.name },
        protocol: PROTOCOLS[s.protocol.kind],
        authorizations: [...s.authorizations, LOCALHOST_AUTHZ].map(authzJson),
        routes: routesOf(s).map((r) => ({ kind: r.meta.kind, name: r.meta.name, authorizations: r.authorizations.map(authzJson) })),
      };
    }),
  }));
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

/**
 * The proxy's `/debug/policies` document: every declared port (pod ports, then the admin port,
 * then the ports discovered in transparent mode) with where it listens and the policy in force.
 */
import { X509Certificate } from 'node:crypto';
import { serverToProtoJson } from '../api/index.js';
import type { WorkloadCertificate } from '../identity/index.js';
import { ADMIN_POLICY_PORT } from './admin-server.js';
import type { PolicyWatcher } from './inbound/policy-watch.js';
import type { RotatingMeshTls } from './tls/rotating-mesh-tls.js';
import type { ProxyBoundPorts, ProxyCertificateInfo, ProxyDebugPolicies, ProxyDebugPort, ProxyOptions } from './types.js';

/** What the document is read from. */
export interface DebugPoliciesSource {
  readonly opts: Pick<ProxyOptions, 'namespace' | 'pod' | 'inbound' | 'mesh' | 'admin' | 'listenHost' | 'appHost'>;
  readonly identity: string;
  /** Transparent mode: every pod port arrives through the mesh listener. */
  readonly transparent: boolean;
  readonly watcher: PolicyWatcher;
  readonly tls: RotatingMeshTls;
  readonly isReady: () => boolean;
  /** The bound ports, once the listeners are bound (the configured ones before). */
  readonly bound: () => ProxyBoundPorts | undefined;
}

/** Serial numbers by certificate object (parsed once per certificate). */
const serials = new WeakMap<WorkloadCertificate, string>();

function certificateInfo(cert: WorkloadCertificate): ProxyCertificateInfo {
  let serial = serials.get(cert);
  if (serial === undefined) {
    serial = new X509Certificate(cert.certPem).serialNumber;
    serials.set(cert, serial);
  }
  return { identity: cert.identity, notAfter: new Date(cert.notAfterMs).toISOString(), serial };
}

function hostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

/** Builds the `/debug/policies` document anew on every call. */
export function makeDebugPolicies(s: DebugPoliciesSource): () => ProxyDebugPolicies {
  const { opts, watcher } = s;
  return () => {
    const bound = s.bound();
    const cert = s.tls.certificate;
    const ports: ProxyDebugPort[] = opts.inbound.map((p, i) => {
      const current = watcher.current(p.podPort);
      const listenPort = bound?.inbound[i]?.listenPort ?? p.listenPort;
      return {
        port: p.podPort,
        listen: s.transparent ? hostPort(opts.mesh.host, bound?.mesh ?? opts.mesh.port) : hostPort(opts.listenHost, listenPort),
        app: hostPort(opts.appHost, p.appPort),
        policy: current === undefined ? null : serverToProtoJson(current.server),
        ...(current?.invalid !== undefined ? { invalid: current.invalid } : {}),
      };
    });
    const admin = watcher.current(ADMIN_POLICY_PORT);
    ports.push({
      port: ADMIN_POLICY_PORT,
      listen: hostPort(opts.admin.host, bound?.admin ?? opts.admin.port),
      app: null,
      policy: admin === undefined ? null : serverToProtoJson(admin.server),
      ...(admin?.invalid !== undefined ? { invalid: admin.invalid } : {}),
      ...(admin === undefined ? { fallback: true } : {}),
    });
    for (const port of watcher.discoveredPorts) {
      const current = watcher.current(port);
      ports.push({
        port,
        listen: hostPort(opts.mesh.host, bound?.mesh ?? opts.mesh.port),
        // The pod's address: where connections to an undeclared port arrive (the inbound proxy's appHostOf).
        app: hostPort(opts.listenHost, port),
        policy: current === undefined ? null : serverToProtoJson(current.server),
        ...(current?.invalid !== undefined ? { invalid: current.invalid } : {}),
        discovered: true,
      });
    }
    return {
      workload: { namespace: opts.namespace, pod: opts.pod },
      identity: s.identity,
      ready: s.isReady(),
      certificate: cert === undefined ? null : certificateInfo(cert),
      ports,
    };
  };
}

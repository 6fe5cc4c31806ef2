/**
 * `ward diagnostics policy`: the `io.linkerd.proxy.inbound.Server` message the controller would
 * stream for a pod's port, in the canonical proto3 JSON mapping.
 */
import { stringify } from 'yaml';
import { serverToProtoJson } from '../../api/index.js';
import { parseResourceArg } from '../../index/index.js';
import { type CliIo, EXIT, UsageError } from '../io.js';
import { json } from '../output.js';
import type { Workspace } from '../workspace.js';

/** Runs `ward diagnostics policy`. */
export function runDiagnosticsPolicy(ws: Workspace, resource: string, portText: string, namespace: string | undefined, output: string, io: CliIo): number {
  const { namespace: ns, pod, port } = policyTarget(resource, portText, namespace);
  const cell = ws.index.peek(ns, pod, port);
  if (cell === undefined) throw new UsageError(`pod ${ns}/${pod} not found (unknown server)`);
  return printPolicy(serverToProtoJson(cell.value), output, io);
}

/** Parses `pod/[NS/]NAME PORT`. */
export function policyTarget(resource: string, portText: string, namespace: string | undefined): { namespace: string; pod: string; port: number } {
  const arg = parseResourceArg(resource);
  if (arg.kind !== 'Pod' || arg.name === undefined) throw new UsageError(`expected pod/NAME or pod/NAMESPACE/NAME, got "${resource}"`);
  const port = Number(portText);
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new UsageError(`invalid port "${portText}" (1-65535)`);
  return { namespace: arg.namespace ?? namespace ?? 'default', pod: arg.name, port };
}

/** Prints a policy message (computed here or by a controller). */
export function printPolicy(msg: unknown, output: string, io: CliIo): number {
  io.out(output === 'json' ? json(msg) : stringify(msg));
  return EXIT.ok;
}

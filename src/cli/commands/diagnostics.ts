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
  const arg = parseResourceArg(resource);
  if (arg.kind !== 'Pod' || arg.name === undefined) throw new UsageError(`expected pod/NAME or pod/NAMESPACE/NAME, got "${resource}"`);
  const port = Number(portText);
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new UsageError(`invalid port "${portText}" (1-65535)`);
  const ns = arg.namespace ?? namespace ?? 'default';
  const cell = ws.index.lookup(ns, arg.name, port);
  if (cell === undefined) throw new UsageError(`pod ${ns}/${arg.name} not found (unknown server)`);
  const msg = serverToProtoJson(cell.value);
  io.out(output === 'json' ? json(msg) : stringify(msg));
  return EXIT.ok;
}

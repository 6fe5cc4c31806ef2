/**
 * What the `ward authz` policy-object tests share: the CLI run in-process, the rows of its JSON,
 * and a real loopback admin server over the same manifests, so that `--controller` answers can be
 * compared with `-f` ones.
 */
import { clusterConfig } from '../../src/cli/cluster-config.js';
import { bufferIo } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { buildWorkspace } from '../../src/cli/workspace.js';
import { type AdminServer, startAdminServer } from '../../src/controller/index.js';
import { serviceAccountIdentity } from '../../src/core/index.js';
import type { PolicyTargetsResult } from '../../src/index/index.js';
import { silentLogger } from '../../src/shared/index.js';

/** `ward ARGS`, in this process. */
export async function cli(args: string[]): Promise<{ status: number; stdout: string; stderr: string }> {
  const io = bufferIo();
  const status = await main(args, io);
  return { status, stdout: io.stdout, stderr: io.stderr };
}

/** `pod:port server route` of every row of every object. */
export function rowsOf(stdout: string): string[] {
  const r = JSON.parse(stdout) as PolicyTargetsResult;
  return r.policies.flatMap((o) => o.appliesTo.map((x) => `${o.kind}/${o.name} ${x.pod}:${x.port} ${x.server} ${x.route ?? '*'}`));
}

/** An admin server on loopback over the manifests at `paths`, and its base URL. */
export async function adminServerOver(paths: readonly string[]): Promise<{ server: AdminServer; base: string }> {
  const config = clusterConfig({});
  const ws = buildWorkspace({ paths: [...paths] }, config);
  const server = await startAdminServer(
    {
      view: ws,
      isReady: () => true,
      settings: () => ({ trustDomain: config.trustDomain }),
      files: () => [],
      resources: () => [],
      metrics: () => Promise.resolve({ contentType: 'text/plain; version=0.0.4', text: '' }),
      identityOf: (ns, sa) => serviceAccountIdentity(config, ns, sa),
    },
    '127.0.0.1',
    0,
    silentLogger(),
  );
  return { server, base: `http://127.0.0.1:${server.port}` };
}

/**
 * `ward prometheus-config [--kubernetes | --local]`: prints a Prometheus configuration whose
 * `linkerd-proxy` job scrapes every meshed pod's proxy admin port (`/metrics` on 4191) and adds
 * the labels ward's views query by (`namespace`, `pod`, `workload_kind`, `workload_name`), the
 * ones the controller's embedded collector adds; with it, `ward controller --metrics-backend
 * prometheus` answers as the embedded collector does.
 *
 * - `--kubernetes` (the default): pod discovery, keeping the `linkerd-admin` port of each
 *   `linkerd-proxy` container (the injector's names), relabelled as linkerd-viz's Prometheus
 *   relabels, plus the owning workload from the pod's controller reference (a ReplicaSet with a
 *   `pod-template-hash` stands for its Deployment).
 * - `--local`: static targets, the admin addresses of the running `ward up`'s meshed pods with
 *   their labels. A snapshot: print it again when pods come and go.
 */
import { type Command, Option } from '@commander-js/extra-typings';
import { stringify } from 'yaml';
import type { PodStatus } from '../../local/index.js';
import { PROXY_CONTAINER_NAME } from '../../manifest/index.js';
import { type CliIo, EXIT, UsageError } from '../io.js';
import { callLocalApi, requireLocalMesh } from '../local-client.js';

/** The job name (linkerd-viz's, which the Prometheus backend queries by). */
export const PROXY_JOB = 'linkerd-proxy';
/** The admin port's name in the injected proxy container. */
const ADMIN_PORT_NAME = 'linkerd-admin';
/** The characters of a `pod-template-hash` (Kubernetes' SafeEncodeString alphabet). */
const HASH_CHARS = '[bcdfghjklmnpqrstvwxz2456789]+';

/** Settings shared by both configurations. */
export interface PrometheusConfigOptions {
  /** A Prometheus duration (`10s`, `1m`). */
  readonly scrapeInterval: string;
}

const PROMETHEUS_DURATION = /^(\d+(ms|s|m|h|d|w|y))+$/;

/** The top of a configuration: what it is and how ward reads it. */
function header(lines: readonly string[]): string {
  return [
    `# Prometheus configuration for ward's proxies (\`ward prometheus-config ${lines[0]}\`).`,
    '# The linkerd-proxy job adds the labels ward queries by: namespace, pod, workload_kind,',
    '# workload_name. Point the controller at this Prometheus with',
    '#   ward controller --metrics-backend prometheus --prometheus-url http://PROMETHEUS:9090',
    ...lines.slice(1).map((l) => (l === '' ? '#' : `# ${l}`)),
    '',
  ].join('\n');
}

function global(opts: PrometheusConfigOptions): Record<string, unknown> {
  return { scrape_interval: opts.scrapeInterval, evaluation_interval: opts.scrapeInterval };
}

/** The configuration for a cluster: Kubernetes pod discovery with linkerd-viz's relabelling. */
export function kubernetesPrometheusConfig(opts: PrometheusConfigOptions): string {
  const job = {
    job_name: PROXY_JOB,
    kubernetes_sd_configs: [{ role: 'pod' }],
    relabel_configs: [
      { source_labels: ['__meta_kubernetes_pod_phase'], regex: 'Pending|Running', action: 'keep' },
      {
        source_labels: ['__meta_kubernetes_pod_container_name', '__meta_kubernetes_pod_container_port_name'],
        regex: `${PROXY_CONTAINER_NAME};${ADMIN_PORT_NAME}`,
        action: 'keep',
      },
      { source_labels: ['__meta_kubernetes_namespace'], target_label: 'namespace' },
      { source_labels: ['__meta_kubernetes_pod_name'], target_label: 'pod' },
      // The owning workload: the pod itself, else its controller, and a ReplicaSet named
      // `<deployment>-<pod-template-hash>` stands for the Deployment (as ward's Kubernetes source
      // names owners). Relabelling has no backreferences, so the name's suffix is checked to be
      // a hash, not to be this pod's hash.
      { target_label: 'workload_kind', replacement: 'Pod' },
      { source_labels: ['__meta_kubernetes_pod_name'], target_label: 'workload_name' },
      { source_labels: ['__meta_kubernetes_pod_controller_kind'], regex: '(.+)', target_label: 'workload_kind' },
      { source_labels: ['__meta_kubernetes_pod_controller_name'], regex: '(.+)', target_label: 'workload_name' },
      {
        source_labels: ['__meta_kubernetes_pod_controller_kind', '__meta_kubernetes_pod_controller_name', '__meta_kubernetes_pod_label_pod_template_hash'],
        regex: `ReplicaSet;(.+)-${HASH_CHARS};${HASH_CHARS}`,
        target_label: 'workload_kind',
        replacement: 'Deployment',
      },
      {
        source_labels: ['__meta_kubernetes_pod_controller_kind', '__meta_kubernetes_pod_controller_name', '__meta_kubernetes_pod_label_pod_template_hash'],
        regex: `ReplicaSet;(.+)-${HASH_CHARS};${HASH_CHARS}`,
        target_label: 'workload_name',
        replacement: '$1',
      },
    ],
  };
  return (
    header([
      '--kubernetes',
      '',
      'Prometheus needs RBAC to list and watch pods cluster-wide (as linkerd-viz grants its own).',
      '',
      "Scraping with the mesh's identity: run this Prometheus meshed, as linkerd-viz runs its own",
      '(annotate its pod linkerd.io/inject: enabled). Its proxy then reaches every pod with mutual',
      "TLS as Prometheus's ServiceAccount, and the pods' admin ports can be locked to it: in each",
      'namespace, a Server for port linkerd-admin (podSelector: {}) and an AuthorizationPolicy',
      'targeting it whose MeshTLSAuthentication names that ServiceAccount (identityRefs:',
      '[{kind: ServiceAccount, name: prometheus, namespace: <its namespace>}]). With no HTTPRoute',
      "on that Server, the kubelet's probes of /live and /ready stay authorized. Unmeshed,",
      'Prometheus scrapes in plaintext, which a default policy of all-unauthenticated (or a',
      'NetworkAuthentication of its network) must admit.',
    ]) + stringify({ global: global(opts), scrape_configs: [job] }, { lineWidth: 0 })
  );
}

/** The configuration for a running `ward up`: one static target per meshed pod. */
export function localPrometheusConfig(
  pods: readonly Pick<PodStatus, 'namespace' | 'name' | 'owner' | 'adminAddress'>[],
  opts: PrometheusConfigOptions,
): string {
  const targets = pods
    .filter((p): p is typeof p & { adminAddress: string } => p.adminAddress !== null)
    .map((p) => {
      const slash = p.owner?.indexOf('/') ?? -1;
      const owner = p.owner !== null && slash > 0 ? { kind: p.owner.slice(0, slash), name: p.owner.slice(slash + 1) } : { kind: 'Pod', name: p.name };
      return { targets: [p.adminAddress], labels: { namespace: p.namespace, pod: p.name, workload_kind: owner.kind, workload_name: owner.name } };
    });
  const job = { job_name: PROXY_JOB, static_configs: targets };
  return (
    header([
      '--local',
      '',
      'The meshed pods of the running `ward up`, as they are now: print this again when pods',
      'come and go (a restart keeps the addresses). Prometheus scrapes from the host, in',
      "plaintext: the pods' policy must admit it on port 4191 (the all-unauthenticated default",
      'does; else a Server for port linkerd-admin with an AuthorizationPolicy whose',
      'NetworkAuthentication admits 127.0.0.1/32).',
    ]) + stringify({ global: global(opts), scrape_configs: [job] }, { lineWidth: 0 })
  );
}

/** Registers `ward prometheus-config`. */
export function registerPrometheusConfigCommand(program: Command, io: CliIo, result: { status: number }): void {
  program
    .command('prometheus-config')
    .description('print a Prometheus configuration that scrapes the proxies with the labels ward queries by')
    .addOption(new Option('--kubernetes', 'discover pods in a Kubernetes cluster (the default)').conflicts('local'))
    .addOption(new Option('--local', 'static targets: the meshed pods of the running `ward up`').conflicts('kubernetes'))
    .option('--state-dir <dir>', 'state directory of the local mesh (with --local; default as for `ward up`)')
    .option('--scrape-interval <duration>', 'how often Prometheus scrapes each proxy (a Prometheus duration)', '10s')
    .action(async (opts) => {
      result.status = await runPrometheusConfig(opts, io);
    });
}

/** Runs `ward prometheus-config`. */
export async function runPrometheusConfig(flags: { kubernetes?: true; local?: true; stateDir?: string; scrapeInterval: string }, io: CliIo): Promise<number> {
  if (!PROMETHEUS_DURATION.test(flags.scrapeInterval))
    throw new UsageError(`invalid --scrape-interval "${flags.scrapeInterval}": want a Prometheus duration such as 10s, 1m or 1m30s`);
  const opts = { scrapeInterval: flags.scrapeInterval };
  if (flags.local !== true) {
    if (flags.stateDir !== undefined) throw new UsageError('--state-dir goes with --local');
    io.out(kubernetesPrometheusConfig(opts));
    return EXIT.ok;
  }
  const mesh = await requireLocalMesh(flags.stateDir);
  const status = (await (await callLocalApi(mesh, '/api/v1/local/status')).json()) as { pods: PodStatus[] };
  io.out(localPrometheusConfig(status.pods, opts));
  return EXIT.ok;
}

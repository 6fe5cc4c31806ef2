/**
 * Workloads: namespace, workload, pods, meshed, ready, identity and default policy, filterable.
 * Enter (or a click) opens the workload's policy tab.
 */
import { useCallback, useMemo, useState } from 'preact/hooks';
import type { Graph, GraphNode, PodEntry } from '../api.js';
import { go } from '../state.js';
import { useRowKeys } from './keys.js';

function matches(n: GraphNode, filter: string): boolean {
  if (filter === '') return true;
  const f = filter.toLowerCase();
  return [n.namespace, n.kind, n.name, n.identity ?? '', n.serviceAccount ?? ''].some((s) => s.toLowerCase().includes(f));
}

/**
 * Ready pods as Kubernetes reports them; where no pod carries conditions (`ward up`, manifests),
 * how many pods' proxies answer the controller's scrape, said as such.
 */
function Ready({ n, proxiesUp }: { n: GraphNode; proxiesUp: ReadonlyMap<string, boolean> | undefined }) {
  if (n.readyPods !== null) return <span data-ready={`${n.readyPods}/${n.pods}`}>{`${n.readyPods}/${n.pods}`}</span>;
  const known = n.meshed && proxiesUp !== undefined ? n.podNames.filter((p) => proxiesUp.has(`${n.namespace}/${p}`)) : [];
  if (known.length === 0) {
    return (
      <span class="muted" title="no pod reports a Ready condition, and the controller scrapes no proxy of it">
        –
      </span>
    );
  }
  const up = known.filter((p) => proxiesUp?.get(`${n.namespace}/${p}`) === true).length;
  return (
    <span
      data-proxies-up={`${up}/${n.pods}`}
      title="pods whose proxy answers the controller's scrape (no Ready condition is reported here)"
      class={up < n.pods ? 'warn' : undefined}
    >
      {up}/{n.pods} proxy up
    </span>
  );
}

export function WorkloadsView({
  graph,
  pods,
  namespace,
  proxiesUp,
}: {
  graph: Graph;
  pods: readonly PodEntry[];
  namespace: string;
  proxiesUp: ReadonlyMap<string, boolean> | undefined;
}) {
  const [filter, setFilter] = useState('');
  const rows = useMemo(
    () => graph.nodes.filter((n) => n.namespace !== '' && (namespace === '' || n.namespace === namespace) && matches(n, filter)),
    [graph, namespace, filter],
  );
  const podCount = useMemo(() => {
    const byNs = new Map<string, number>();
    for (const p of pods) byNs.set(p.namespace, (byNs.get(p.namespace) ?? 0) + 1);
    return byNs;
  }, [pods]);
  const open = useCallback(
    (i: number) => {
      const n = rows[i];
      if (n?.meshed === true) go('policy', [n.namespace, n.kind, n.name]);
    },
    [rows],
  );
  const [selected, setSelected] = useRowKeys(rows.length, open);
  const meshedCount = rows.filter((n) => n.meshed).length;
  return (
    <section aria-label="workloads">
      <div class="toolbar">
        <input
          type="search"
          placeholder="filter: namespace, name, identity  (/)"
          value={filter}
          onInput={(e) => setFilter((e.target as HTMLInputElement).value)}
          data-filter
          aria-label="filter workloads"
        />
        <span class="muted">
          {rows.length} workloads, {meshedCount} meshed
          {namespace !== '' ? `, ${podCount.get(namespace) ?? 0} meshed pods in ${namespace}` : `, ${pods.length} meshed pods`}
        </span>
      </div>
      <table class="grid">
        <thead>
          <tr>
            <th>namespace</th>
            <th>workload</th>
            <th class="num">pods</th>
            <th>meshed</th>
            <th>ready</th>
            <th>identity</th>
            <th>default policy</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((n, i) => (
            <tr
              key={n.id}
              data-workload={n.id}
              data-row-index={i}
              aria-selected={selected === i}
              class={selected === i ? 'selected' : undefined}
              onClick={() => {
                setSelected(i);
                open(i);
              }}
            >
              <td>{n.namespace}</td>
              <td>
                {n.meshed ? (
                  <a href={`#/policy/${[n.namespace, n.kind, n.name].map(encodeURIComponent).join('/')}`}>
                    {n.kind.toLowerCase()}/{n.name}
                  </a>
                ) : (
                  `${n.kind.toLowerCase()}/${n.name}`
                )}
              </td>
              <td class="num">{n.pods}</td>
              <td data-meshed={String(n.meshed)}>{n.meshed ? 'yes' : <span class="warn">no</span>}</td>
              <td>
                <Ready n={n} proxiesUp={proxiesUp} />
              </td>
              <td class="mono">{n.identity ?? <span class="muted">plaintext</span>}</td>
              <td>
                {n.defaultPolicy === null ? (
                  <span class="muted">–</span>
                ) : (
                  <span>
                    {n.defaultPolicy.name}
                    {n.defaultPolicy.stale && (
                      <span
                        class="badge warn"
                        data-stale
                        title={`the namespace now says ${n.defaultPolicy.namespaceValue}; running pods keep ${n.defaultPolicy.name} until recreated`}
                      >
                        stale
                      </span>
                    )}
                  </span>
                )}
              </td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

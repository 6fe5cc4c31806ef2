/**
 * Policy of one workload: per port, the Server (or default policy) and its protocol, each
 * authorization with whom it admits, each route with its own authorizations, and, from the
 * who-can-talk graph, which workloads each route admits. Reloaded whenever the policy changes.
 */
import { useCallback, useEffect, useMemo, useState } from 'preact/hooks';
import { type AuthzEntry, type Graph, type GraphNode, getJson, type PodView, resourceArg } from '../api.js';
import { go } from '../state.js';
import { useRowKeys } from './keys.js';

function AuthzList({ list, scope }: { list: readonly AuthzEntry[]; scope: string }) {
  if (list.length === 0) return <p class="muted">no {scope} authorizations</p>;
  return (
    <ul class="authz">
      {list.map((a) => (
        <li key={`${a.kind}/${a.name}`} data-authz={`${a.kind}/${a.name}`}>
          <span class="mono">
            {a.kind}/{a.name}
          </span>{' '}
          <span class="muted">admits</span> {a.admits}
        </li>
      ))}
    </ul>
  );
}

function DefaultPolicy({ node }: { node: GraphNode }) {
  const d = node.defaultPolicy;
  if (d === null) return null;
  return (
    <p class="default-policy" data-default-policy={d.name}>
      Default policy <b>{d.name}</b>, from{' '}
      {d.source === 'pod-annotation' ? 'the pod annotation config.linkerd.io/default-inbound-policy (set when the pod was created)' : 'the cluster default'}
      {d.namespaceValue !== null && <>; the namespace says {d.namespaceValue} now</>}.{' '}
      {d.stale ? (
        <span class="badge warn" data-stale>
          stale: running pods keep {d.name} until they are recreated
        </span>
      ) : (
        <span class="muted">It applies to ports no Server selects.</span>
      )}
      {node.podsDiffer && <span class="badge warn"> the pods of this workload do not all enforce the same policy (the first pod is shown)</span>}
    </p>
  );
}

/** A workload id as people read it: `emojivoto/web`, `host`. */
function short(id: string): string {
  if (id.startsWith('*')) return id === '*' ? 'every client' : id.replace(/^\* except/, 'every client except');
  const [ns, , name] = id.split('/');
  if (ns === '') return name === 'localhost' ? 'the host' : 'unmeshed clients';
  return `${ns}/${name}`;
}

function Callers({ who }: { who: ReadonlyMap<string, readonly string[]> | undefined }) {
  if (who === undefined || who.size === 0) {
    return (
      <p class="callers" data-admitted="">
        <span class="muted">admits</span> <span class="deny">no workload</span>
      </p>
    );
  }
  return (
    <ul class="callers" data-admitted={[...who.values()].flat().join(' ')}>
      {[...who].map(([authz, srcs]) => (
        <li key={authz} data-admits-by={authz}>
          <span class="muted">by</span> <span class="mono">{authz}</span>: {srcs.map(short).join(', ')}
        </li>
      ))}
    </ul>
  );
}

export function PolicyView({ graph, args, namespace }: { graph: Graph; args: readonly string[]; namespace: string }) {
  const [ns, kind, name] = args;
  const id = ns !== undefined && kind !== undefined && name !== undefined ? `${ns}/${kind}/${name}` : undefined;
  const node = graph.nodes.find((n) => n.id === id);
  const workloads = useMemo(() => graph.nodes.filter((n) => n.meshed && (namespace === '' || n.namespace === namespace)), [graph, namespace]);
  const [pod, setPod] = useState<PodView | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  const open = useCallback(
    (i: number) => {
      const n = workloads[i];
      if (n !== undefined) go('policy', [n.namespace, n.kind, n.name]);
    },
    [workloads],
  );
  const [selected] = useRowKeys(workloads.length, open);

  useEffect(() => {
    if (node === undefined || !node.meshed) {
      setPod(undefined);
      return;
    }
    const q = new URLSearchParams({ resource: resourceArg(node.kind, node.name, node.namespace), namespace: node.namespace });
    const ctl = new AbortController();
    getJson<{ pods: PodView[] }>(`/api/v1/authz?${q}`, ctl.signal)
      .then((r) => {
        setPod(r.pods[0]);
        setError(undefined);
      })
      .catch((e: unknown) => {
        if (!ctl.signal.aborted) setError(e instanceof Error ? e.message : String(e));
      });
    return () => ctl.abort();
  }, [node, graph.version]);

  // Who each port and route admits, from the graph, grouped by the admitting authorization.
  const callers = useMemo(() => {
    const m = new Map<string, Map<string, string[]>>();
    for (const e of graph.edges) {
      if (e.dst !== id) continue;
      const r = graph.targets[e.target]?.routes[e.route];
      const key = `${e.port}|${r?.route ?? ''}`;
      const byAuthz = m.get(key) ?? new Map<string, string[]>();
      const authz = e.decision === 'audit' ? `${e.authz} (audit)` : e.authz;
      byAuthz.set(authz, [...(byAuthz.get(authz) ?? []), e.src]);
      m.set(key, byAuthz);
    }
    for (const b of graph.bulk) {
      if (b.dst !== id) continue;
      const r = graph.targets[b.target]?.routes[b.route];
      const key = `${b.port}|${r?.route ?? ''}`;
      const byAuthz = m.get(key) ?? new Map<string, string[]>();
      const authz = b.decision === 'audit' ? `${b.authz} (audit)` : b.authz;
      byAuthz.set(authz, [...(byAuthz.get(authz) ?? []), b.except.length === 0 ? '*' : `* except ${b.except.map(short).join(', ')}`]);
      m.set(key, byAuthz);
    }
    return m;
  }, [graph, id]);
  const ports = useMemo(() => {
    const proxy = (p: number) => graph.targets.find((t) => t.node === id && t.port === p)?.proxyPort === true;
    return [...(pod?.ports ?? [])].sort((a, b) => Number(proxy(a.port)) - Number(proxy(b.port)) || a.port - b.port);
  }, [pod, graph, id]);

  return (
    <section class="policy" aria-label="policy">
      <aside class="picker">
        <input
          type="search"
          placeholder="workloads (/)"
          data-filter
          aria-label="filter"
          onInput={(e) => {
            const v = (e.target as HTMLInputElement).value.toLowerCase();
            const hit = workloads.find((n) => n.id.toLowerCase().includes(v));
            if (hit !== undefined && v !== '') go('policy', [hit.namespace, hit.kind, hit.name]);
          }}
        />
        <ul>
          {workloads.map((n, i) => (
            <li key={n.id} data-row-index={i} class={n.id === id ? 'current' : selected === i ? 'selected' : undefined}>
              <a href={`#/policy/${[n.namespace, n.kind, n.name].map(encodeURIComponent).join('/')}`}>
                {n.namespace}/{n.name}
              </a>
            </li>
          ))}
        </ul>
      </aside>
      <div class="detail">
        {node === undefined ? (
          <p class="muted">Pick a workload (j/k then Enter, or click).</p>
        ) : (
          <>
            <h2 data-policy-of={node.id}>
              {node.kind.toLowerCase()}/{node.name} <span class="muted">in {node.namespace}</span>
            </h2>
            <p class="mono muted">
              identity {node.identity ?? '(none)'} · service account {node.serviceAccount}
            </p>
            <DefaultPolicy node={node} />
            {error !== undefined && <p class="error">{error}</p>}
            {ports.map((p) => {
              const target = graph.targets.find((t) => t.node === node.id && t.port === p.port);
              return (
                <article key={p.port} class="port" data-port={p.port}>
                  <h3>
                    port {p.port}{' '}
                    <span class="mono" data-server={`${p.server.kind}/${p.server.name}`}>
                      {p.server.kind}/{p.server.name}
                    </span>{' '}
                    <span class="badge">{p.protocol}</span>
                    {target?.proxyPort === true && <span class="badge">{target.proxyAdmin ? 'proxy admin' : 'proxy'}</span>}
                  </h3>
                  <h4>Server authorizations</h4>
                  <AuthzList list={p.authorizations} scope="server" />
                  {p.routes.length > 0 && <h4>Routes</h4>}
                  {p.routes.map((r) => {
                    const g = target?.routes.find((x) => x.route === `${r.kind}/${r.name}`);
                    const who = callers.get(`${p.port}|${r.kind}/${r.name}`);
                    return (
                      <div key={`${r.kind}/${r.name}`} class="route" data-route={`${r.kind}/${r.name}`}>
                        <p>
                          <span class="mono">
                            {r.kind}/{r.name}
                          </span>
                          {g?.sample != null && <span class="muted"> e.g. {g.sample}</span>}
                          {g?.probe === true && <span class="badge">probe</span>}
                          {g?.shadowed === true && <span class="badge warn">no request reaches it</span>}
                        </p>
                        <AuthzList list={r.authorizations} scope="route-level" />
                        <Callers who={who} />
                      </div>
                    );
                  })}
                  {p.routes.length === 0 && <Callers who={callers.get(`${p.port}|`)} />}
                </article>
              );
            })}
          </>
        )}
      </div>
    </section>
  );
}

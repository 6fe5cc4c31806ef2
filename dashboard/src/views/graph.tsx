/**
 * Graph: who can talk to whom by policy, with observed traffic laid over it. Every node and edge
 * is an SVG group carrying `data-node` / `data-edge` (and the edge's state, policy, rates and
 * security) so that tests and people read the same facts. Layout by elkjs, loaded on first use.
 */
import { useCallback, useEffect, useMemo, useState } from 'preact/hooks';
import type { Graph, GraphBulk, GraphNode, TrafficEdge } from '../api.js';
import { type Layout, layoutGraph, nodeSize } from '../layout.js';
import { COLLAPSE_AT, collapseToNamespaces, type GraphFilter, openRoutes, type PairEdge, pairEdges, rate, visibleNodes } from '../model.js';
import { go } from '../state.js';
import { useRowKeys } from './keys.js';

const STATE_LABEL: Record<PairEdge['state'], string> = {
  'allowed-used': 'allowed, used',
  'allowed-unused': 'allowed, never used',
  'used-denied': 'used, denied',
  audit: 'audit only',
};

function label(n: GraphNode): { title: string; sub: string } {
  if (n.kind === 'Namespace') return { title: n.name, sub: `namespace · ${n.pods} workloads` };
  if (n.namespace === '') return { title: n.name === 'localhost' ? 'host (127.0.0.1)' : 'unmeshed clients', sub: n.kind.toLowerCase() };
  return { title: n.name, sub: `${n.namespace} · ${n.kind.toLowerCase()}${n.meshed ? '' : ' · unmeshed'}` };
}

function pathOf(points: readonly { x: number; y: number }[]): string {
  return points.map((p, i) => `${i === 0 ? 'M' : 'L'}${p.x.toFixed(1)},${p.y.toFixed(1)}`).join(' ');
}

function EdgePanel({ e, graph }: { e: PairEdge; graph: Graph }) {
  const dst = graph.nodes.find((n) => n.id === e.dst);
  const src = graph.nodes.find((n) => n.id === e.src);
  const explainParams: Record<string, string> = { from: e.src, to: e.dst };
  const first = e.permits[0];
  const t0 = first !== undefined ? graph.targets[first.target] : graph.targets.find((t) => t.node === e.dst && !t.proxyPort);
  if (t0 !== undefined) explainParams.port = String(t0.port);
  return (
    <div data-panel-edge={e.id}>
      <h3>
        {src !== undefined ? label(src).title : e.src} → {dst !== undefined ? label(dst).title : e.dst}
      </h3>
      <p>
        <span class={`badge ${e.state}`}>{STATE_LABEL[e.state]}</span> policy:{' '}
        <b>{e.policy === 'partial' ? `some routes (${new Set(e.permits.map((p) => `${p.target}/${p.route}`)).size} of ${e.routesCounted})` : e.policy}</b>
      </p>
      <p>
        traffic: {rate(e.rps)} allowed, <span class={e.deniedRps > 0 ? 'deny' : undefined}>{rate(e.deniedRps)} denied</span>
        {e.secured === null ? (
          <span class="muted"> · nothing seen in the last minute</span>
        ) : e.secured ? (
          ' · mTLS'
        ) : (
          <span class="deny"> · not secured{e.reason !== null ? ` (${e.reason})` : ''}</span>
        )}
      </p>
      <h4>Allowed routes</h4>
      {e.permits.length === 0 ? (
        <p class="deny">none: policy denies every route counted here</p>
      ) : (
        <ul>
          {e.permits.map((p) => {
            const t = graph.targets[p.target];
            const r = t?.routes[p.route];
            return (
              <li key={`${p.target}/${p.route}`} data-permit={`${p.port} ${r?.route ?? 'connection'}`}>
                port {p.port} {r?.route ?? 'connection'} {r?.sample !== null && r?.sample !== undefined ? <span class="muted">({r.sample})</span> : null} —{' '}
                {p.decision} by <span class="mono">{p.authz}</span>
              </li>
            );
          })}
        </ul>
      )}
      <p>
        <a href={`#/explain?${new URLSearchParams(explainParams)}`}>explain a request on this edge</a>
      </p>
    </div>
  );
}

function NodePanel({ n, edges, open, graph }: { n: GraphNode; edges: readonly PairEdge[]; open: readonly GraphBulk[]; graph: Graph }) {
  const inbound = edges.filter((e) => e.dst === n.id);
  const outbound = edges.filter((e) => e.src === n.id);
  const line = (e: PairEdge, other: string) => (
    <li key={e.id} data-panel-link={e.id}>
      <span class={`dot ${e.state}`} /> {other.startsWith('/') ? other.slice(1) : other} <span class="muted">{STATE_LABEL[e.state]}</span>
      {e.rps + e.deniedRps > 0 && (
        <span class="muted">
          {' '}
          · {rate(e.rps)} ok, {rate(e.deniedRps)} denied
        </span>
      )}
    </li>
  );
  return (
    <div data-panel-node={n.id}>
      <h3>{label(n).title}</h3>
      <p class="mono muted">{n.identity ?? 'no mesh identity'}</p>
      {n.meshed && (
        <p>
          <a href={`#/policy/${[n.namespace, n.kind, n.name].map(encodeURIComponent).join('/')}`}>policy of this workload</a>
        </p>
      )}
      {open.length > 0 && (
        <>
          <h4>Open to nearly every client</h4>
          <ul>
            {open.map((b) => (
              <li key={`${b.target}/${b.route}`} data-open-route={`${b.port} ${graph.targets[b.target]?.routes[b.route]?.route ?? 'connection'}`}>
                port {b.port} {graph.targets[b.target]?.routes[b.route]?.route ?? 'connection'}: {b.decision} by <span class="mono">{b.authz}</span>
                {b.except.length > 0 && <span class="muted"> — except {b.except.length} clients</span>}
              </li>
            ))}
          </ul>
        </>
      )}
      <h4>May be called by ({inbound.filter((e) => e.policy !== 'deny').length})</h4>
      <ul>{inbound.map((e) => line(e, e.src))}</ul>
      <h4>May call ({outbound.filter((e) => e.policy !== 'deny').length})</h4>
      <ul>{outbound.map((e) => line(e, e.dst))}</ul>
    </div>
  );
}

export function GraphView({
  graph,
  traffic,
  trafficError,
  namespace,
  onNamespace,
}: {
  graph: Graph;
  traffic: readonly TrafficEdge[];
  trafficError: string | undefined;
  namespace: string;
  onNamespace: (ns: string) => void;
}) {
  const [filter, setFilter] = useState<GraphFilter>({ showAdmin: false, showProbes: false, showExternal: true, namespace });
  const [expandAll, setExpandAll] = useState(false);
  const f = { ...filter, namespace };
  const workloadEdges = useMemo(() => pairEdges(graph, traffic, f), [graph, traffic, f.showAdmin, f.showProbes, f.showExternal, f.namespace]);
  const workloadNodes = useMemo(() => visibleNodes(graph, workloadEdges, f), [graph, workloadEdges, f.showExternal, f.namespace]);
  // Hundreds of workloads make one unreadable (and slow to lay out) picture: show namespaces,
  // and their workloads when one is chosen.
  const collapsed = !expandAll && workloadNodes.filter((n) => n.namespace !== '').length > COLLAPSE_AT;
  const { nodes, edges } = useMemo(
    () => (collapsed ? collapseToNamespaces(workloadNodes, workloadEdges) : { nodes: workloadNodes, edges: workloadEdges }),
    [collapsed, workloadNodes, workloadEdges],
  );
  const open = useMemo(() => openRoutes(graph, f), [graph, f.showAdmin, f.showProbes]);
  const [layout, setLayout] = useState<{ key: string; layout: Layout } | undefined>(undefined);
  const [layoutError, setLayoutError] = useState<string | undefined>(undefined);
  const [selectedEdge, setSelectedEdge] = useState<string | undefined>(undefined);
  const [selectedNode, setSelectedNode] = useState<string | undefined>(undefined);

  // Layout depends on which nodes and edges exist, not on rates: traffic updates never move nodes.
  const shapeKey = useMemo(() => `${nodes.map((n) => n.id).join('|')}#${edges.map((e) => e.id).join('|')}`, [nodes, edges]);
  useEffect(() => {
    let cancelled = false;
    const started = performance.now();
    layoutGraph(
      nodes.map((n) => {
        const l = label(n);
        return { id: n.id, ...nodeSize(l.title, l.sub) };
      }),
      edges,
      { wrap: collapsed },
    )
      .then((l) => {
        if (cancelled) return;
        setLayout({ key: shapeKey, layout: l });
        setLayoutError(undefined);
        (window as unknown as { wardLayoutMs?: number }).wardLayoutMs = performance.now() - started;
      })
      .catch((e: unknown) => {
        if (!cancelled) setLayoutError(e instanceof Error ? e.message : String(e));
      });
    return () => {
      cancelled = true;
    };
  }, [shapeKey]);

  const choose = (n: GraphNode) => {
    if (n.kind === 'Namespace') {
      setSelectedNode(undefined);
      onNamespace(n.namespace);
    } else setSelectedNode(n.id);
    setSelectedEdge(undefined);
  };
  const selectNode = useCallback(
    (i: number) => {
      const n = nodes[i];
      if (n !== undefined) choose(n);
    },
    [nodes],
  );
  const [cursor] = useRowKeys(nodes.length, selectNode);
  useEffect(() => {
    const n = nodes[cursor];
    if (n !== undefined) document.querySelector<SVGGElement>(`[data-node="${CSS.escape(n.id)}"]`)?.focus();
  }, [cursor]);

  const counts = useMemo(() => {
    const c: Record<string, number> = {};
    for (const e of edges) c[e.state] = (c[e.state] ?? 0) + 1;
    return c;
  }, [edges]);
  const l = layout?.layout;
  const ready = layout !== undefined && layout.key === shapeKey;
  const edge = edges.find((e) => e.id === selectedEdge);
  const node = graph.nodes.find((n) => n.id === selectedNode);
  const toggle = (k: keyof GraphFilter) => setFilter((x) => ({ ...x, [k]: !x[k] }));

  return (
    <section class="graph" aria-label="who can talk">
      <div class="toolbar">
        <label>
          <input type="checkbox" checked={filter.showProbes} onChange={() => toggle('showProbes')} data-toggle="probes" /> probe routes
        </label>
        <label>
          <input type="checkbox" checked={filter.showAdmin} onChange={() => toggle('showAdmin')} data-toggle="admin" /> proxy ports
        </label>
        {(collapsed || expandAll) && (
          <label title="lay out every workload at once (slow with hundreds)">
            <input type="checkbox" checked={expandAll} onChange={() => setExpandAll(!expandAll)} data-toggle="expand" /> every workload
          </label>
        )}
        {namespace !== '' && (
          <button type="button" class="link" onClick={() => onNamespace('')} data-all-namespaces>
            all namespaces
          </button>
        )}
        <label>
          <input type="checkbox" checked={filter.showExternal} onChange={() => toggle('showExternal')} data-toggle="external" /> host and unmeshed clients
        </label>
        <span class="legend">
          {(Object.keys(STATE_LABEL) as PairEdge['state'][]).map((s) => (
            <span key={s} data-legend={s}>
              <span class={`dot ${s}`} /> {STATE_LABEL[s]} <b>{counts[s] ?? 0}</b>
            </span>
          ))}
        </span>
        {trafficError !== undefined && (
          <span class="muted" title={trafficError}>
            (no traffic overlay: {trafficError})
          </span>
        )}
      </div>
      <div class="graph-body">
        <div class="canvas">
          {layoutError !== undefined && <p class="error">layout failed: {layoutError}</p>}
          {l === undefined ? (
            <p class="muted">laying out {nodes.length} workloads…</p>
          ) : (
            <svg
              width={l.width + 20}
              height={l.height + 20}
              viewBox={`-10 -10 ${l.width + 20} ${l.height + 20}`}
              data-graph-ready={ready ? 'true' : 'false'}
              data-nodes={nodes.length}
              data-level={collapsed ? 'namespaces' : 'workloads'}
              data-edges={edges.length}
              role="img"
              aria-label={`who can talk: ${nodes.length} workloads, ${edges.length} edges`}
            >
              <defs>
                {(Object.keys(STATE_LABEL) as PairEdge['state'][]).map((s) => (
                  <marker
                    key={s}
                    id={`arrow-${s}`}
                    viewBox="0 0 10 10"
                    refX="9"
                    refY="5"
                    markerWidth="7"
                    markerHeight="7"
                    orient="auto-start-reverse"
                    class={`marker ${s}`}
                  >
                    <path d="M0,0 L10,5 L0,10 z" />
                  </marker>
                ))}
              </defs>
              {edges.map((e) => {
                const pts = l.edges.get(e.id);
                if (pts === undefined) return null;
                // Halfway along the middle segment: clear of both nodes.
                const a = pts[Math.max(0, Math.floor((pts.length - 1) / 2))];
                const b2 = pts[Math.min(pts.length - 1, Math.floor((pts.length - 1) / 2) + 1)];
                const mid = a !== undefined && b2 !== undefined ? { x: (a.x + b2.x) / 2, y: (a.y + b2.y) / 2 } : undefined;
                const dim = selectedNode !== undefined && e.src !== selectedNode && e.dst !== selectedNode;
                return (
                  // biome-ignore lint/a11y/noStaticElementInteractions: an SVG group; the same facts are reachable by keyboard from the nodes' panel
                  <g
                    key={e.id}
                    data-edge={e.id}
                    data-src={e.src}
                    data-dst={e.dst}
                    data-state={e.state}
                    data-policy={e.policy}
                    data-rps={e.rps}
                    data-denied-rps={e.deniedRps}
                    data-secured={e.secured === null ? 'unknown' : String(e.secured)}
                    class={`edge ${e.state}${e.policy === 'partial' ? ' partial' : ''}${selectedEdge === e.id ? ' selected' : ''}${dim ? ' dim' : ''}${e.secured === false ? ' plaintext' : ''}`}
                    onClick={() => {
                      setSelectedEdge(e.id);
                      setSelectedNode(undefined);
                    }}
                  >
                    <title>
                      {e.src} → {e.dst}: {STATE_LABEL[e.state]}
                    </title>
                    <path d={pathOf(pts)} class="hit" />
                    <path d={pathOf(pts)} class="line" marker-end={`url(#arrow-${e.state})`} />
                    {mid !== undefined && (e.rps > 0 || e.deniedRps > 0) && (
                      <text x={mid.x} y={mid.y - 4} class="edge-label">
                        {e.secured === false ? 'plaintext ' : e.secured === true ? 'mTLS ' : ''}
                        {rate(e.rps)}
                        {e.deniedRps > 0 ? ` · ${rate(e.deniedRps)} denied` : ''}
                      </text>
                    )}
                  </g>
                );
              })}
              {nodes.map((n) => {
                const b = l.nodes.get(n.id);
                if (b === undefined) return null;
                const t = label(n);
                return (
                  // biome-ignore lint/a11y/useSemanticElements: an SVG group cannot be a <button>; it takes focus and Enter itself
                  <g
                    key={n.id}
                    data-node={n.id}
                    data-meshed={String(n.meshed)}
                    data-open={open.get(n.id)?.length ?? 0}
                    class={`node${n.meshed ? '' : ' unmeshed'}${open.has(n.id) ? ' open' : ''}${n.namespace === '' ? ' external' : ''}${selectedNode === n.id ? ' selected' : ''}`}
                    transform={`translate(${b.x},${b.y})`}
                    tabindex={0}
                    role="button"
                    aria-label={`${t.title} (${t.sub})`}
                    onClick={() => choose(n)}
                    onKeyDown={(ev) => {
                      if (ev.key === 'Enter' || ev.key === ' ') {
                        ev.preventDefault();
                        ev.stopPropagation();
                        choose(n);
                      }
                    }}
                  >
                    <rect width={b.w} height={b.h} rx="6" />
                    <text x={b.w / 2} y={16} class="title">
                      {t.title}
                    </text>
                    <text x={b.w / 2} y={31} class="sub">
                      {t.sub}
                    </text>
                  </g>
                );
              })}
            </svg>
          )}
        </div>
        <aside class="panel" aria-live="polite">
          {edge !== undefined ? (
            <EdgePanel e={edge} graph={graph} />
          ) : node !== undefined ? (
            <NodePanel n={node} edges={edges} open={open.get(node.id) ?? []} graph={graph} />
          ) : (
            <p class="muted">
              Select a workload (Tab or j/k, then Enter) or an edge. Only permits are drawn, and denied traffic: a pair with neither is denied and unused.{' '}
              <button type="button" class="link" onClick={() => go('explain')}>
                Explain a request
              </button>
            </p>
          )}
        </aside>
      </div>
    </section>
  );
}

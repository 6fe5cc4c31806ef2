/**
 * Graph: who can talk to whom by policy, with observed traffic laid over it. Every node and edge
 * is an SVG group carrying `data-node` / `data-edge` (and the edge's state, policy, rates and
 * security) so that tests and people read the same facts. Layout by elkjs, loaded on first use.
 */
import { useCallback, useEffect, useMemo, useRef, useState } from 'preact/hooks';
import type { Graph, GraphBulk, GraphNode, TrafficEdge } from '../api.js';
import { type Layout, labelSize, layoutGraph, nodeSize } from '../layout.js';
import { COLLAPSE_AT, collapseToNamespaces, type GraphFilter, openRoutes, type PairEdge, pairEdges, rate, visibleNodes } from '../model.js';
import { go } from '../state.js';
import { isTyping, useRowKeys } from './keys.js';

const STATE_LABEL: Record<PairEdge['state'], string> = {
  'allowed-used': 'allowed, used',
  'allowed-unused': 'allowed, never used',
  'used-denied': 'used, denied',
  audit: 'audit only',
};

const STATES = Object.keys(STATE_LABEL) as PairEdge['state'][];

/** Margin around the laid-out graph, in layout units. */
const PAD = 14;
/** The graph is scaled to fit its panel, never above this (a few nodes would be poster-sized). */
const MAX_SCALE = 1.5;
/** Below this, fitting the whole graph makes text too small: fit the width and scroll instead. */
const MIN_FIT = 0.75;
/** Fitting the width never goes below this: wider graphs scroll sideways too. */
const MIN_SCALE = 0.6;
const ZOOM_STEP = 1.25;

/**
 * The rate label of an edge with traffic (none without: an idle edge's label would say nothing).
 * `fmt` formats a rate; the layout passes a fixed-width stand-in so that changing rates never move
 * nodes, only an edge gaining or losing traffic does.
 */
function edgeLabel(e: PairEdge, fmt: (n: number) => string): string | undefined {
  if (e.rps <= 0 && e.deniedRps <= 0) return undefined;
  const security = e.secured === false ? 'plaintext ' : e.secured === true ? 'mTLS ' : '';
  const ok = e.rps > 0 ? fmt(e.rps) : '';
  const denied = e.deniedRps > 0 ? `${fmt(e.deniedRps)} denied` : '';
  return `${security}${ok}${ok !== '' && denied !== '' ? ' · ' : ''}${denied}`;
}

/** The widest text `rate` gives below 10,000/s. */
const widestRate = () => '0.00/s';

/** A short sample of an edge state's line, for the legend and the panels. */
function Swatch({ state }: { state: PairEdge['state'] }) {
  return (
    <svg class="swatch" width="30" height="10" aria-hidden="true">
      <g class={`edge ${state}`}>
        <path d="M1,5 L29,5" class="line" />
      </g>
    </svg>
  );
}

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
      <Swatch state={e.state} /> {other.startsWith('/') ? other.slice(1) : other} <span class="muted">{STATE_LABEL[e.state]}</span>
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
  // 1 = fitted to the panel; the keys + - 0 and the toolbar's buttons change it.
  const [zoom, setZoomState] = useState(1);
  // Zooming keeps the point at the middle of the canvas in the middle.
  const centre = useRef<{ x: number; y: number } | undefined>(undefined);
  const setZoom = (z: number | ((z: number) => number)) => {
    const el = canvas.current;
    if (el !== null && el.scrollWidth > 0) {
      centre.current = { x: (el.scrollLeft + el.clientWidth / 2) / el.scrollWidth, y: (el.scrollTop + el.clientHeight / 2) / el.scrollHeight };
    }
    setZoomState(z);
  };
  const canvas = useRef<HTMLDivElement>(null);
  const [box, setBox] = useState<{ w: number; h: number } | undefined>(undefined);
  const boxRef = useRef(box);
  boxRef.current = box;
  useEffect(() => {
    const el = canvas.current;
    if (el === null) return;
    const measure = () => setBox({ w: el.clientWidth, h: el.clientHeight });
    measure();
    const ro = new ResizeObserver(measure);
    ro.observe(el);
    return () => ro.disconnect();
  }, []);
  useEffect(() => {
    const on = (ev: KeyboardEvent) => {
      if (ev.ctrlKey || ev.metaKey || ev.altKey || isTyping(ev.target)) return;
      if (ev.key === '+' || ev.key === '=') setZoom((z) => Math.min(4, z * ZOOM_STEP));
      else if (ev.key === '-') setZoom((z) => Math.max(0.25, z / ZOOM_STEP));
      else if (ev.key === '0') setZoom(1);
      else if (ev.key === 'Escape') {
        setSelectedNode(undefined);
        setSelectedEdge(undefined);
      }
    };
    addEventListener('keydown', on);
    return () => removeEventListener('keydown', on);
  }, []);

  // Layout depends on which nodes and edges exist and which edges carry a label, not on rates:
  // traffic updates never move nodes.
  const shapeKey = useMemo(
    () => `${nodes.map((n) => n.id).join('|')}#${edges.map((e) => `${e.id}:${edgeLabel(e, widestRate) ?? ''}`).join('|')}`,
    [nodes, edges],
  );
  useEffect(() => {
    let cancelled = false;
    const started = performance.now();
    const sized = nodes.map((n) => {
      const t = label(n);
      return { id: n.id, ...nodeSize(t.title, t.sub) };
    });
    const labelled = edges.map((e) => {
      const text = edgeLabel(e, widestRate);
      return text === undefined ? e : { ...e, label: { text, ...labelSize(text) } };
    });
    layoutGraph(sized, labelled, { wrap: collapsed })
      .then(async (l) => {
        // A long chain laid out left to right is far wider than the panel and would be shrunk to
        // unreadable text: top to bottom it fits the width and scrolls down instead. Only for
        // graphs small enough to lay out twice.
        const panel = boxRef.current;
        if (panel === undefined || collapsed || nodes.length > 200 || cancelled) return l;
        const fit = (x: Layout) => Math.min(panel.w / (x.width + 2 * PAD), panel.h / (x.height + 2 * PAD));
        if (fit(l) >= MIN_FIT) return l;
        const down = await layoutGraph(sized, labelled, { direction: 'DOWN' });
        return Math.min(MAX_SCALE, panel.w / (down.width + 2 * PAD)) > Math.max(fit(l), MIN_SCALE) ? down : l;
      })
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
  const viewW = (l?.width ?? 0) + 2 * PAD;
  const viewH = (l?.height ?? 0) + 2 * PAD;
  const fitAll = box === undefined ? 1 : Math.min(box.w / viewW, box.h / viewH);
  const fitted = box === undefined ? 1 : Math.min(MAX_SCALE, fitAll >= MIN_FIT ? fitAll : Math.max(MIN_SCALE, box.w / viewW));
  const scale = fitted * zoom;
  useEffect(() => {
    const el = canvas.current;
    const c = centre.current;
    if (el === null || c === undefined) return;
    centre.current = undefined;
    el.scrollLeft = c.x * el.scrollWidth - el.clientWidth / 2;
    el.scrollTop = c.y * el.scrollHeight - el.clientHeight / 2;
  }, [scale]);
  const selectEdge = (id: string) => {
    setSelectedEdge(id);
    setSelectedNode(undefined);
  };

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
          {STATES.map((s) => (
            <span key={s} data-legend={s}>
              <Swatch state={s} /> {STATE_LABEL[s]} <b>{counts[s] ?? 0}</b>
            </span>
          ))}
        </span>
        <span class="zoom" title="zoom: - and + keys, 0 fits">
          <button type="button" onClick={() => setZoom((z) => Math.max(0.25, z / ZOOM_STEP))} aria-label="zoom out (-)" data-zoom="out">
            −
          </button>
          <button type="button" onClick={() => setZoom(1)} aria-label="fit to the panel (0)" data-zoom="fit">
            {Math.round(scale * 100)}%
          </button>
          <button type="button" onClick={() => setZoom((z) => Math.min(4, z * ZOOM_STEP))} aria-label="zoom in (+)" data-zoom="in">
            +
          </button>
        </span>
        {trafficError !== undefined && (
          <span class="muted" title={trafficError}>
            (no traffic overlay: {trafficError})
          </span>
        )}
      </div>
      <div class="graph-body">
        <div class="canvas" ref={canvas}>
          {layoutError !== undefined && <p class="error">layout failed: {layoutError}</p>}
          {l === undefined ? (
            <p class="muted">laying out {nodes.length} workloads…</p>
          ) : (
            <svg
              width={Math.round(viewW * scale)}
              height={Math.round(viewH * scale)}
              viewBox={`${-PAD} ${-PAD} ${viewW} ${viewH}`}
              data-graph-ready={ready ? 'true' : 'false'}
              data-scale={scale.toFixed(2)}
              data-nodes={nodes.length}
              data-level={collapsed ? 'namespaces' : 'workloads'}
              data-edges={edges.length}
              role="img"
              aria-label={`who can talk: ${nodes.length} workloads, ${edges.length} edges`}
            >
              <defs>
                {STATES.map((s) => (
                  // Denied traffic ends at a bar (blocked), unused permits in an open head: the
                  // head tells the states apart without colour, like the dash patterns do.
                  <marker
                    key={s}
                    id={`arrow-${s}`}
                    viewBox={s === 'used-denied' ? '0 0 15 10' : '0 0 11 10'}
                    refX={s === 'used-denied' ? '14' : '10'}
                    refY="5"
                    markerUnits="userSpaceOnUse"
                    markerWidth={s === 'used-denied' ? '18' : '13'}
                    markerHeight="12"
                    orient="auto-start-reverse"
                    class={`marker ${s}`}
                  >
                    <path d={s === 'used-denied' ? 'M0.5,0.5 L9,5 L0.5,9.5 z M11,0 h3.5 v10 h-3.5 z' : 'M1,1 L10,5 L1,9 z'} />
                  </marker>
                ))}
              </defs>
              {/* Edges with a label last: no other line is drawn across a label's background. */}
              {[...edges.filter((e) => edgeLabel(e, rate) === undefined), ...edges.filter((e) => edgeLabel(e, rate) !== undefined)].map((e) => {
                const pts = l.edges.get(e.id);
                if (pts === undefined) return null;
                const dim = selectedNode !== undefined && e.src !== selectedNode && e.dst !== selectedNode;
                const lb = l.labels.get(e.id);
                const text = edgeLabel(e, rate);
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
                    onClick={() => selectEdge(e.id)}
                  >
                    <title>
                      {e.src} → {e.dst}: {STATE_LABEL[e.state]}
                    </title>
                    <path d={pathOf(pts)} class="hit" />
                    <path d={pathOf(pts)} class="line" marker-end={`url(#arrow-${e.state})`} />
                    {lb !== undefined && text !== undefined && (
                      <g data-edge-label={e.id} class="edge-label" transform={`translate(${lb.x.toFixed(1)},${lb.y.toFixed(1)})`}>
                        <rect width={lb.w} height={lb.h} rx="3" />
                        <text x={lb.w / 2} y={lb.h / 2 + 4}>
                          {text}
                        </text>
                      </g>
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
                    <rect class="ring" x={-4} y={-4} width={b.w + 8} height={b.h + 8} rx="9" />
                    <rect class="box" width={b.w} height={b.h} rx="6" />
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

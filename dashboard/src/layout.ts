/**
 * Layered layout of the graph with elkjs (deterministic: the same graph gives the same picture,
 * so screenshots compare). elkjs is about 1.5 MB, so it is imported here only, when the graph is
 * first shown, and Vite puts it in a chunk of its own.
 */

/** A placed node. */
export interface Box {
  readonly x: number;
  readonly y: number;
  readonly w: number;
  readonly h: number;
}

/** The laid-out graph. */
export interface Layout {
  readonly nodes: ReadonlyMap<string, Box>;
  /** Polyline points per edge id. */
  readonly edges: ReadonlyMap<string, readonly { x: number; y: number }[]>;
  readonly width: number;
  readonly height: number;
}

interface ElkPoint {
  x: number;
  y: number;
}
interface ElkSection {
  startPoint: ElkPoint;
  endPoint: ElkPoint;
  bendPoints?: ElkPoint[];
}
interface ElkResult {
  width?: number;
  height?: number;
  children?: { id: string; x?: number; y?: number; width?: number; height?: number }[];
  edges?: { id: string; sections?: ElkSection[] }[];
}
interface Elk {
  layout(graph: unknown): Promise<ElkResult>;
}

let elk: Promise<Elk> | undefined;

async function loadElk(): Promise<Elk> {
  elk ??= import('elkjs/lib/elk.bundled.js').then((m) => {
    const Ctor = (m as unknown as { default: new () => Elk }).default;
    return new Ctor();
  });
  return elk;
}

/** Node size from its label: monospace-ish estimate, enough for ELK to keep labels apart. */
export function nodeSize(label: string, sub: string): { w: number; h: number } {
  return { w: Math.max(90, Math.max(label.length, sub.length) * 7.2 + 24), h: 40 };
}

/** Lays out nodes (with their sizes) and edges (src → dst); `wrap` folds long chains into rows. */
export async function layoutGraph(
  nodes: readonly { id: string; w: number; h: number }[],
  edges: readonly { id: string; src: string; dst: string }[],
  opts: { readonly wrap?: boolean } = {},
): Promise<Layout> {
  const e = await loadElk();
  const ids = new Set(nodes.map((n) => n.id));
  const result = await e.layout({
    id: 'root',
    layoutOptions: {
      'elk.algorithm': 'layered',
      'elk.direction': 'RIGHT',
      'elk.edgeRouting': 'POLYLINE',
      'elk.layered.spacing.nodeNodeBetweenLayers': '70',
      'elk.spacing.nodeNode': '18',
      // Big graphs: fewer crossing-minimisation passes and simple placement (7 s instead of 22 s
      // for 500 nodes in elkjs); small ones get the careful layout.
      'elk.layered.thoroughness': nodes.length > 60 ? '1' : '3',
      ...(nodes.length > 60 ? { 'elk.layered.nodePlacement.strategy': 'SIMPLE', 'elk.layered.crossingMinimization.greedySwitch.type': 'OFF' } : {}),
      'elk.separateConnectedComponents': 'true',
      'elk.spacing.componentComponent': '30',
      'elk.randomSeed': '1',
      // Long chains (a ring of namespaces) wrap into rows instead of one screen-wide line. Only
      // on request: wrapped workload graphs grow long detours, and hundreds of nodes take twice
      // as long.
      ...(opts.wrap === true ? { 'elk.layered.wrapping.strategy': 'MULTI_EDGE', 'elk.aspectRatio': '1.6' } : {}),
    },
    children: nodes.map((n) => ({ id: n.id, width: n.w, height: n.h })),
    // Self-loops are drawn by the view; ELK gets only edges between two nodes it knows.
    edges: edges.filter((x) => x.src !== x.dst && ids.has(x.src) && ids.has(x.dst)).map((x) => ({ id: x.id, sources: [x.src], targets: [x.dst] })),
  });
  const placed = new Map<string, Box>();
  for (const c of result.children ?? []) placed.set(c.id, { x: c.x ?? 0, y: c.y ?? 0, w: c.width ?? 0, h: c.height ?? 0 });
  const routed = new Map<string, { x: number; y: number }[]>();
  for (const x of result.edges ?? []) {
    const s = x.sections?.[0];
    if (s !== undefined) routed.set(x.id, [s.startPoint, ...(s.bendPoints ?? []), s.endPoint]);
  }
  return { nodes: placed, edges: routed, width: result.width ?? 0, height: result.height ?? 0 };
}

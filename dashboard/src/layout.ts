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
  /** Where ELK put each edge's label (top-left corner and size), by edge id. */
  readonly labels: ReadonlyMap<string, Box>;
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
  edges?: { id: string; sections?: ElkSection[]; labels?: { x?: number; y?: number; width?: number; height?: number }[] }[];
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

/** Height of an edge label: one line of 11 px text and its padding. */
export const LABEL_HEIGHT = 16;

/** Edge label size from its text (11 px system font, about 6.2 px a character, plus padding). */
export function labelSize(text: string): { w: number; h: number } {
  return { w: Math.ceil(text.length * 6.2 + 10), h: LABEL_HEIGHT };
}

/**
 * Lays out nodes (with their sizes) and edges (src → dst, with an optional label size: ELK keeps
 * labels clear of nodes, lines and each other; it ignores a label without text); `wrap` folds
 * long chains into rows.
 */
export async function layoutGraph(
  nodes: readonly { id: string; w: number; h: number }[],
  edges: readonly { id: string; src: string; dst: string; label?: { text: string; w: number; h: number } }[],
  opts: { readonly wrap?: boolean; readonly direction?: 'RIGHT' | 'DOWN' } = {},
): Promise<Layout> {
  const e = await loadElk();
  const ids = new Set(nodes.map((n) => n.id));
  const result = await e.layout({
    id: 'root',
    layoutOptions: {
      'elk.algorithm': 'layered',
      'elk.direction': opts.direction ?? 'RIGHT',
      'elk.edgeRouting': 'POLYLINE',
      // A labelled edge gets a layer of its own for the label: less room is needed around it.
      'elk.layered.spacing.nodeNodeBetweenLayers': edges.some((x) => x.label !== undefined) ? '36' : '70',
      'elk.spacing.nodeNode': '18',
      // Big graphs: fewer crossing-minimisation passes and simple placement (7 s instead of 22 s
      // for 500 nodes in elkjs); small ones get the careful layout.
      'elk.layered.thoroughness': nodes.length > 60 ? '1' : '3',
      ...(nodes.length > 60 ? { 'elk.layered.nodePlacement.strategy': 'SIMPLE', 'elk.layered.crossingMinimization.greedySwitch.type': 'OFF' } : {}),
      'elk.separateConnectedComponents': 'true',
      'elk.spacing.componentComponent': '30',
      // Labels beside their line, not across it; ELK gives each a slot of its own in the layer
      // between the two nodes.
      'elk.edgeLabels.inline': 'false',
      'elk.spacing.edgeLabel': '3',
      'elk.layered.edgeLabels.sideSelection': 'SMART_UP',
      'elk.randomSeed': '1',
      // Long chains (a ring of namespaces) wrap into rows instead of one screen-wide line. Only
      // on request: wrapped workload graphs grow long detours, and hundreds of nodes take twice
      // as long.
      ...(opts.wrap === true ? { 'elk.layered.wrapping.strategy': 'MULTI_EDGE', 'elk.aspectRatio': '1.6' } : {}),
    },
    children: nodes.map((n) => ({ id: n.id, width: n.w, height: n.h })),
    // Self-loops are drawn by the view; ELK gets only edges between two nodes it knows.
    edges: edges
      .filter((x) => x.src !== x.dst && ids.has(x.src) && ids.has(x.dst))
      .map((x) => ({
        id: x.id,
        sources: [x.src],
        targets: [x.dst],
        ...(x.label !== undefined
          ? {
              labels: [
                { id: `${x.id}#label`, text: x.label.text, width: x.label.w, height: x.label.h, layoutOptions: { 'elk.edgeLabels.placement': 'CENTER' } },
              ],
            }
          : {}),
      })),
  });
  const placed = new Map<string, Box>();
  for (const c of result.children ?? []) placed.set(c.id, { x: c.x ?? 0, y: c.y ?? 0, w: c.width ?? 0, h: c.height ?? 0 });
  const routed = new Map<string, { x: number; y: number }[]>();
  const labels = new Map<string, Box>();
  for (const x of result.edges ?? []) {
    const s = x.sections?.[0];
    if (s !== undefined) routed.set(x.id, [s.startPoint, ...(s.bendPoints ?? []), s.endPoint]);
    const lb = x.labels?.[0];
    if (lb?.x !== undefined && lb.y !== undefined) labels.set(x.id, { x: lb.x, y: lb.y, w: lb.width ?? 0, h: lb.height ?? 0 });
  }
  return { nodes: placed, edges: routed, labels, width: result.width ?? 0, height: result.height ?? 0 };
}

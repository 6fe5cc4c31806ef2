/**
 * The dashboard's live data: the policy graph polled with `since=` (a cheap "unchanged" answer
 * while no resource changed, the whole graph when a policy file was edited), observed traffic
 * polled on its own interval, and the pods list refreshed with the graph.
 */
import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, type Graph, getJson, type PodEntry, type ScrapeTarget, type TrafficEdge } from './api.js';

/** How often the graph version is checked. */
export const GRAPH_POLL_MS = 1500;
/** How often traffic is read. */
export const TRAFFIC_POLL_MS = 3000;

/** What the views share. */
export interface LiveData {
  readonly graph: Graph | undefined;
  readonly pods: readonly PodEntry[];
  readonly traffic: readonly TrafficEdge[];
  /** Whether each pod's proxy (`namespace/pod`) answers the controller's scrape; undefined when unknown. */
  readonly proxiesUp: ReadonlyMap<string, boolean> | undefined;
  /** Why traffic is not shown (the route is missing, the backend failed), or undefined. */
  readonly trafficError: string | undefined;
  readonly error: string | undefined;
  /** When the graph last changed (ms since the epoch, the browser's clock). */
  readonly changedAt: number | undefined;
}

function messageOf(e: unknown): string {
  return e instanceof ApiError ? `${e.code}: ${e.message}` : e instanceof Error ? e.message : String(e);
}

/** Polls the API while mounted. */
export function useLiveData(): LiveData {
  const [data, setData] = useState<LiveData>({
    graph: undefined,
    pods: [],
    traffic: [],
    proxiesUp: undefined,
    trafficError: undefined,
    error: undefined,
    changedAt: undefined,
  });
  const version = useRef<number | undefined>(undefined);
  useEffect(() => {
    let stopped = false;
    let graphTimer: ReturnType<typeof setTimeout> | undefined;
    let trafficTimer: ReturnType<typeof setTimeout> | undefined;
    const pollGraph = async () => {
      try {
        const since = version.current === undefined ? '' : `&since=${version.current}`;
        const g = await getJson<Graph | { version: number; unchanged: true }>(`/api/v1/graph?allNamespaces=true${since}`);
        if (!('unchanged' in g)) {
          const pods = await getJson<{ pods: PodEntry[] }>('/api/v1/pods').catch(() => ({ pods: [] as PodEntry[] }));
          version.current = g.version;
          if (!stopped) setData((d) => ({ ...d, graph: g, pods: pods.pods, error: undefined, changedAt: Date.now() }));
        } else if (!stopped) setData((d) => (d.error === undefined ? d : { ...d, error: undefined }));
      } catch (e) {
        if (!stopped) setData((d) => ({ ...d, error: `cannot read the policy graph: ${messageOf(e)}` }));
      }
      if (!stopped) graphTimer = setTimeout(() => void pollGraph(), GRAPH_POLL_MS);
    };
    const pollTraffic = async () => {
      try {
        const [t, health] = await Promise.all([
          getJson<{ edges: TrafficEdge[] }>('/api/v1/edges?allNamespaces=true&window=60'),
          getJson<{ targets: ScrapeTarget[] }>('/api/v1/observe/targets').catch(() => undefined),
        ]);
        const proxiesUp = health === undefined ? undefined : new Map(health.targets.map((x) => [`${x.namespace}/${x.pod}`, x.up]));
        if (!stopped) setData((d) => ({ ...d, traffic: t.edges, proxiesUp, trafficError: undefined }));
      } catch (e) {
        const why = e instanceof ApiError && e.status === 404 ? 'this controller does not serve /api/v1/edges' : messageOf(e);
        if (!stopped) setData((d) => ({ ...d, traffic: [], trafficError: why }));
      }
      if (!stopped) trafficTimer = setTimeout(() => void pollTraffic(), TRAFFIC_POLL_MS);
    };
    void pollGraph();
    void pollTraffic();
    return () => {
      stopped = true;
      clearTimeout(graphTimer);
      clearTimeout(trafficTimer);
    };
  }, []);
  return data;
}

/** The view named by the location hash: `#/graph`, `#/policy/NS/KIND/NAME`, `#/explain?from=…`. */
export interface Route {
  readonly view: 'workloads' | 'policy' | 'graph' | 'tap' | 'explain';
  readonly args: readonly string[];
  readonly params: URLSearchParams;
}

const VIEWS: readonly Route['view'][] = ['workloads', 'policy', 'graph', 'tap', 'explain'];

/** Parses a location hash. */
export function parseHash(hash: string): Route {
  const text = hash.replace(/^#\/?/, '');
  const q = text.indexOf('?');
  const path = q === -1 ? text : text.slice(0, q);
  const params = new URLSearchParams(q === -1 ? '' : text.slice(q + 1));
  const [first, ...rest] = path.split('/').map((s) => {
    try {
      return decodeURIComponent(s);
    } catch {
      return s;
    }
  });
  const view = (VIEWS as readonly string[]).includes(first ?? '') ? (first as Route['view']) : 'workloads';
  return { view, args: rest.filter((s) => s !== ''), params };
}

/** The current route; follows `hashchange`. */
export function useRoute(): Route {
  const [route, setRoute] = useState(() => parseHash(location.hash));
  useEffect(() => {
    const on = () => setRoute(parseHash(location.hash));
    addEventListener('hashchange', on);
    return () => removeEventListener('hashchange', on);
  }, []);
  return route;
}

/** Navigates to a view. */
export function go(view: Route['view'], args: readonly string[] = [], params?: Record<string, string>): void {
  const path = [view, ...args.map(encodeURIComponent)].join('/');
  const q = params === undefined ? '' : `?${new URLSearchParams(params)}`;
  location.hash = `#/${path}${q}`;
}

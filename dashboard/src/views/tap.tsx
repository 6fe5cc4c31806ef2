/**
 * Tap: live requests of a workload from /api/v1/tap (NDJSON read as it streams), with the
 * route's filters (path prefix, client identity, method, denied only). The stream ends after the
 * server's bounds (events or seconds); "follow" starts the next one at once.
 */
import { useEffect, useRef, useState } from 'preact/hooks';
import { type Graph, readNdjson, resourceArg, type TapEvent } from '../api.js';

const KEEP = 500;

interface Filters {
  workload: string;
  path: string;
  identity: string;
  method: string;
  denied: boolean;
}

export function TapView({ graph, namespace, params }: { graph: Graph; namespace: string; params: URLSearchParams }) {
  const meshed = graph.nodes.filter((n) => n.meshed && (namespace === '' || n.namespace === namespace));
  const [filters, setFilters] = useState<Filters>({
    workload: params.get('workload') ?? meshed[0]?.id ?? '',
    path: params.get('path') ?? '',
    identity: params.get('identity') ?? '',
    method: params.get('method') ?? '',
    denied: params.get('denied') === 'true',
  });
  const [events, setEvents] = useState<TapEvent[]>([]);
  const [errors, setErrors] = useState<string[]>([]);
  const [running, setRunning] = useState(params.get('start') === 'true');
  const ctl = useRef<AbortController | undefined>(undefined);

  useEffect(() => {
    if (!running) return;
    const node = graph.nodes.find((n) => n.id === filters.workload);
    if (node === undefined) {
      setErrors(['pick a workload to tap']);
      setRunning(false);
      return;
    }
    const c = new AbortController();
    ctl.current = c;
    const q = new URLSearchParams({ resource: resourceArg(node.kind, node.name, node.namespace), namespace: node.namespace, max: '1000', seconds: '30' });
    if (filters.path !== '') q.set('path', filters.path);
    if (filters.identity !== '') q.set('identity', filters.identity);
    if (filters.method !== '') q.set('method', filters.method);
    if (filters.denied) q.set('denied', 'true');
    const run = async () => {
      while (!c.signal.aborted) {
        await readNdjson(`/api/v1/tap?${q}`, c.signal, (v) => {
          const line = v as { error?: { code?: string; message?: string } | null } & Partial<TapEvent>;
          // Events carry `"error": null`; a line reporting a pod that cannot be tapped has no time.
          if (line.time === undefined) {
            const msg = `${line.error?.code ?? 'ERROR'}: ${line.error?.message ?? JSON.stringify(v).slice(0, 200)}`;
            setErrors((es) => (es.includes(msg) ? es : [...es.slice(-4), msg]));
          } else setEvents((es) => [line as TapEvent, ...es].slice(0, KEEP));
        });
      }
    };
    run().catch((e: unknown) => {
      if (!c.signal.aborted) {
        setErrors((es) => [...es.slice(-4), e instanceof Error ? e.message : String(e)]);
        setRunning(false);
      }
    });
    return () => c.abort();
  }, [running, filters.workload, filters.path, filters.identity, filters.method, filters.denied]);

  const set = (k: keyof Filters, v: string | boolean) => setFilters((f) => ({ ...f, [k]: v }));
  return (
    <section aria-label="tap">
      <form
        class="toolbar"
        onSubmit={(e) => {
          e.preventDefault();
          setRunning(!running);
        }}
      >
        <label>
          workload{' '}
          <select value={filters.workload} onChange={(e) => set('workload', (e.target as HTMLSelectElement).value)} data-tap-workload>
            {meshed.map((n) => (
              <option key={n.id} value={n.id}>
                {n.namespace}/{n.name}
              </option>
            ))}
          </select>
        </label>
        <label>
          path <input value={filters.path} placeholder="/api" onInput={(e) => set('path', (e.target as HTMLInputElement).value)} data-filter size={10} />
        </label>
        <label>
          client identity <input value={filters.identity} onInput={(e) => set('identity', (e.target as HTMLInputElement).value)} size={24} />
        </label>
        <label>
          method <input value={filters.method} placeholder="GET" onInput={(e) => set('method', (e.target as HTMLInputElement).value.toUpperCase())} size={6} />
        </label>
        <label>
          <input type="checkbox" checked={filters.denied} onChange={(e) => set('denied', (e.target as HTMLInputElement).checked)} data-tap-denied /> denied only
        </label>
        <button type="submit" data-tap-toggle={running ? 'stop' : 'start'}>
          {running ? 'Stop' : 'Start'}
        </button>
        <button type="button" onClick={() => setEvents([])}>
          Clear
        </button>
        <span class="muted">{running ? `tapping… ${events.length} events` : `${events.length} events`}</span>
      </form>
      {errors.map((e) => (
        <p key={e} class="error">
          {e}
        </p>
      ))}
      <table class="grid tap">
        <thead>
          <tr>
            <th>time</th>
            <th>decision</th>
            <th>client</th>
            <th>request</th>
            <th>route</th>
            <th>authorization / reason</th>
            <th class="num">status</th>
            <th class="num">ms</th>
          </tr>
        </thead>
        <tbody>
          {events.map((ev, i) => (
            <tr key={`${ev.time}-${i}`} data-tap-event data-decision={ev.decision} class={ev.decision}>
              <td class="mono">{ev.time.slice(11, 23)}</td>
              <td>
                <span class={`badge ${ev.decision}`}>{ev.decision}</span>
              </td>
              <td class="mono" title={ev.clientAddr}>
                {ev.clientId ?? <span class="warn">{ev.tls ? 'TLS, no identity' : `plaintext ${ev.clientAddr}`}</span>}
              </td>
              <td class="mono">
                {ev.method} {ev.authority}
                {ev.path}
              </td>
              <td class="mono">{ev.route ?? '–'}</td>
              <td class="mono">{ev.authz ?? ev.reason ?? '–'}</td>
              <td class="num">{ev.status ?? '–'}</td>
              <td class="num">{ev.latencyMs === null ? '–' : ev.latencyMs.toFixed(1)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </section>
  );
}

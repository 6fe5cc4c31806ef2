/**
 * The dashboard's shell: header with the views, the namespace filter and the live status; the
 * keyboard map (digits or initials switch views, `/` focuses the filter, `?` shows the keys).
 */
import { useEffect, useMemo, useState } from 'preact/hooks';
import { go, type Route, useLiveData, useRoute } from './state.js';
import { ExplainView } from './views/explain.js';
import { GraphView } from './views/graph.js';
import { PolicyView } from './views/policy.js';
import { TapView } from './views/tap.js';
import { WorkloadsView } from './views/workloads.js';

const TABS: readonly { view: Route['view']; label: string; key: string }[] = [
  { view: 'workloads', label: 'Workloads', key: '1' },
  { view: 'policy', label: 'Policy', key: '2' },
  { view: 'graph', label: 'Graph', key: '3' },
  { view: 'tap', label: 'Tap', key: '4' },
  { view: 'explain', label: 'Explain', key: '5' },
];

const LETTERS: Record<string, Route['view']> = { w: 'workloads', p: 'policy', g: 'graph', t: 'tap', e: 'explain' };

function isTyping(t: EventTarget | null): boolean {
  const el = t as HTMLElement | null;
  return el !== null && (el.tagName === 'INPUT' || el.tagName === 'TEXTAREA' || el.tagName === 'SELECT' || el.isContentEditable);
}

export function App() {
  const route = useRoute();
  const live = useLiveData();
  const [namespace, setNamespace] = useState('');
  const [help, setHelp] = useState(false);
  const namespaces = useMemo(() => [...new Set((live.graph?.nodes ?? []).map((n) => n.namespace).filter((n) => n !== ''))].sort(), [live.graph]);

  useEffect(() => {
    const on = (e: KeyboardEvent) => {
      if (e.ctrlKey || e.metaKey || e.altKey) return;
      if (isTyping(e.target)) {
        if (e.key === 'Escape') (e.target as HTMLElement).blur();
        return;
      }
      const tab = TABS.find((t) => t.key === e.key);
      const view = tab?.view ?? LETTERS[e.key];
      if (view !== undefined) {
        e.preventDefault();
        if (view === 'policy' && route.view === 'policy') return;
        go(view, view === 'policy' ? lastPolicyArgs : []);
      } else if (e.key === '/') {
        e.preventDefault();
        document.querySelector<HTMLElement>('[data-filter]')?.focus();
      } else if (e.key === '?') {
        setHelp((h) => !h);
      } else if (e.key === 'Escape') {
        setHelp(false);
      }
    };
    addEventListener('keydown', on);
    return () => removeEventListener('keydown', on);
  }, [route.view]);

  if (route.view === 'policy' && route.args.length === 3) lastPolicyArgs = route.args;
  const updated = live.changedAt === undefined ? 'loading…' : `policy v${live.graph?.version} · changed ${new Date(live.changedAt).toLocaleTimeString()}`;
  return (
    <div class="shell" data-view={route.view} data-version={live.graph?.version ?? ''}>
      <header>
        <h1>ward</h1>
        <nav aria-label="views">
          {TABS.map((t) => (
            <a
              key={t.view}
              href={`#/${t.view}${t.view === 'policy' && lastPolicyArgs.length > 0 ? `/${lastPolicyArgs.map(encodeURIComponent).join('/')}` : ''}`}
              aria-current={route.view === t.view ? 'page' : undefined}
              data-tab={t.view}
            >
              <kbd>{t.key}</kbd> {t.label}
            </a>
          ))}
        </nav>
        <label class="ns">
          namespace{' '}
          <select value={namespace} onChange={(e) => setNamespace((e.target as HTMLSelectElement).value)} data-namespace-select>
            <option value="">all</option>
            {namespaces.map((n) => (
              <option key={n} value={n}>
                {n}
              </option>
            ))}
          </select>
        </label>
        <span class="live" title="the dashboard checks the policy every 1.5 s and traffic every 3 s">
          {updated}
        </span>
        <button type="button" class="help-button" onClick={() => setHelp(!help)} aria-label="keyboard shortcuts">
          ?
        </button>
      </header>
      {live.error !== undefined && (
        <p class="error" role="alert">
          {live.error}
        </p>
      )}
      {help && <Help />}
      <main>
        {live.graph === undefined ? (
          <p class="muted">loading the policy graph…</p>
        ) : route.view === 'workloads' ? (
          <WorkloadsView graph={live.graph} pods={live.pods} namespace={namespace} proxiesUp={live.proxiesUp} />
        ) : route.view === 'policy' ? (
          <PolicyView graph={live.graph} args={route.args} namespace={namespace} />
        ) : route.view === 'graph' ? (
          <GraphView graph={live.graph} traffic={live.traffic} trafficError={live.trafficError} namespace={namespace} onNamespace={setNamespace} />
        ) : route.view === 'tap' ? (
          <TapView graph={live.graph} namespace={namespace} params={route.params} />
        ) : (
          <ExplainView graph={live.graph} params={route.params} />
        )}
      </main>
    </div>
  );
}

/** The policy tab remembers the last workload shown, so `2` goes back to it. */
let lastPolicyArgs: readonly string[] = [];

function Help() {
  return (
    <section class="help" aria-label="keyboard shortcuts">
      <h2>Keys</h2>
      <dl>
        <dt>1–5, w p g t e</dt>
        <dd>Workloads, Policy, Graph, Tap, Explain</dd>
        <dt>/</dt>
        <dd>focus the view's filter</dd>
        <dt>j k, ↓ ↑</dt>
        <dd>move through rows (workloads, policy list, graph nodes)</dd>
        <dt>Enter</dt>
        <dd>open the selected workload's policy (or select a graph node)</dd>
        <dt>+ − 0</dt>
        <dd>zoom the graph in, out, back to fit</dd>
        <dt>Esc</dt>
        <dd>leave a field, clear the selection, close this</dd>
        <dt>?</dt>
        <dd>show or hide these keys</dd>
      </dl>
    </section>
  );
}

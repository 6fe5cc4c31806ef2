/**
 * Explain: "can deploy/vote-bot in bad call deploy/web GET /api/vote?" as a form, answered by
 * POST /api/v1/explain and printed as `ward explain` prints it (verdict line, then the chain).
 */
import { useEffect, useMemo, useState } from 'preact/hooks';
import { ApiError, type ExplainResult, type Graph, type GraphNode, postJson, resourceArg } from '../api.js';

/** The same text as `ward explain` (src/cli/commands/explain.ts formatExplain), without colour. */
export function formatExplain(r: ExplainResult): string {
  const verdict = r.decision === 'allow' ? 'ALLOW' : r.decision === 'audit-allow' ? 'AUDIT-ALLOW' : `DENY (${r.denyKind})`;
  const width = Math.max(...r.chain.map((s) => s.step.length));
  const lines = r.chain.map((s) => `  ${s.step.padEnd(width)}  ${s.detail}`);
  return `${verdict}  level ${r.level}, ${r.server.kind}/${r.server.name}${r.route ? `, route ${r.route.kind}/${r.route.name}` : ''}${r.authz ? `, authz ${r.authz.kind}/${r.authz.name}` : ''}\n${lines.join('\n')}\n`;
}

/** The explain body for a client node: its ServiceAccount over mesh TLS, or plaintext from its address. */
function clientOf(n: GraphNode): Record<string, string> {
  const ip = n.ipAssumed ? {} : { fromIp: n.ip };
  if (n.meshed && n.serviceAccount !== null) return { ...ip, fromSa: `${n.namespace}/${n.serviceAccount}` };
  return { ...ip, fromIp: n.ip, tls: 'none' };
}

function nodeLabel(n: GraphNode): string {
  if (n.namespace === '') return n.name === 'localhost' ? 'the host (127.0.0.1, plaintext)' : 'an unmeshed client (plaintext)';
  return `${n.kind.toLowerCase()}/${n.name} in ${n.namespace}${n.meshed ? '' : ' (unmeshed)'}`;
}

export function ExplainView({ graph, params }: { graph: Graph; params: URLSearchParams }) {
  const sources = graph.nodes;
  const targets = useMemo(() => graph.nodes.filter((n) => n.meshed), [graph]);
  const [from, setFrom] = useState(params.get('from') ?? sources[0]?.id ?? '');
  const [to, setTo] = useState(params.get('to') ?? targets[0]?.id ?? '');
  const ports = useMemo(() => graph.targets.filter((t) => t.node === to), [graph, to]);
  const [port, setPort] = useState(params.get('port') ?? '');
  const [kind, setKind] = useState<'http' | 'grpc' | 'tcp'>((params.get('kind') as 'http' | 'grpc' | 'tcp' | null) ?? 'http');
  const [request, setRequest] = useState(params.get('http') ?? params.get('grpc') ?? 'GET /');
  const [result, setResult] = useState<ExplainResult | undefined>(undefined);
  const [error, setError] = useState<string | undefined>(undefined);
  const [busy, setBusy] = useState(false);

  useEffect(() => {
    if (ports.length > 0 && !ports.some((p) => String(p.port) === port)) setPort(String((ports.find((p) => !p.proxyPort) ?? ports[0])?.port ?? ''));
  }, [ports]);

  const ask = async () => {
    const src = graph.nodes.find((n) => n.id === from);
    const dst = graph.nodes.find((n) => n.id === to);
    if (src === undefined || dst === undefined) {
      setError('pick a client and a destination');
      return;
    }
    const body: Record<string, unknown> = { to: `${resourceArg(dst.kind, dst.name, dst.namespace)}:${port}`, namespace: dst.namespace, ...clientOf(src) };
    if (kind === 'http') body.http = request;
    else if (kind === 'grpc') body.grpc = request;
    else body.tcp = true;
    setBusy(true);
    try {
      setResult(await postJson<ExplainResult>('/api/v1/explain', body));
      setError(undefined);
    } catch (e) {
      setResult(undefined);
      setError(e instanceof ApiError ? `${e.code}: ${e.message}` : e instanceof Error ? e.message : String(e));
    } finally {
      setBusy(false);
    }
  };
  useEffect(() => {
    if (params.get('run') === 'true') void ask();
  }, []);

  return (
    <section class="explain" aria-label="explain">
      <form
        onSubmit={(e) => {
          e.preventDefault();
          void ask();
        }}
      >
        <p class="sentence">
          Can{' '}
          <select value={from} onChange={(e) => setFrom((e.target as HTMLSelectElement).value)} data-explain-from aria-label="client" data-filter>
            {sources.map((n) => (
              <option key={n.id} value={n.id}>
                {nodeLabel(n)}
              </option>
            ))}
          </select>{' '}
          call{' '}
          <select value={to} onChange={(e) => setTo((e.target as HTMLSelectElement).value)} data-explain-to aria-label="destination">
            {targets.map((n) => (
              <option key={n.id} value={n.id}>
                {nodeLabel(n)}
              </option>
            ))}
          </select>{' '}
          port{' '}
          <select value={port} onChange={(e) => setPort((e.target as HTMLSelectElement).value)} data-explain-port aria-label="port">
            {ports.map((p) => (
              <option key={p.port} value={String(p.port)}>
                {p.port} ({p.protocol}){p.proxyPort ? ' (the proxy)' : ''}
              </option>
            ))}
          </select>{' '}
          with{' '}
          <select
            value={kind}
            onChange={(e) => setKind((e.target as HTMLSelectElement).value as 'http' | 'grpc' | 'tcp')}
            data-explain-kind
            aria-label="traffic"
          >
            <option value="http">HTTP</option>
            <option value="grpc">gRPC</option>
            <option value="tcp">a TCP connection</option>
          </select>{' '}
          {kind !== 'tcp' && (
            <input
              value={request}
              onInput={(e) => setRequest((e.target as HTMLInputElement).value)}
              placeholder={kind === 'http' ? 'GET /api/vote' : 'emojivoto.v1.EmojiService/ListAll'}
              data-explain-request
              aria-label="request"
              size={28}
            />
          )}
          ?{' '}
          <button type="submit" disabled={busy} data-explain-submit>
            Explain
          </button>
        </p>
      </form>
      {error !== undefined && (
        <p class="error" role="alert">
          {error}
        </p>
      )}
      {result !== undefined && (
        <pre class={`explain-out ${result.decision}`} data-explain-decision={result.decision}>
          {formatExplain(result)}
        </pre>
      )}
    </section>
  );
}

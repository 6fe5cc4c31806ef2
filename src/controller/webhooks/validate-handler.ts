/**
 * The validating webhook (`POST /validate`): the object under review goes through the decoding
 * and admission rules `ward check` applies (manifest's `admitDocuments`), so the cluster refuses
 * exactly what `ward check` reports as rejected, with the same text minus file positions and
 * with the field's path. Deletions and kinds ward does not read are admitted; lint warnings on
 * admitted objects come back as warnings (kubectl prints them).
 */
import { compareDiagnostics, type Diagnostic } from '../../core/index.js';
import { admitDocuments, decodeResource, documentFromObject, formatPath, isLinkerdAtMost217, type Resource } from '../../manifest/index.js';
import { type AdmissionRequest, type AdmissionResponse, allow, deny, isRecord } from './admission-review.js';

/** What the validating webhook needs from the controller. */
export interface ValidateOptions {
  /** Linkerd version whose webhook to emulate (default `latest`). */
  readonly version?: string | undefined;
  /**
   * Objects in the cluster the rules compare with (the ≤2.17 overlapping-Server rule), e.g. the
   * controller's cached Servers of the namespace. Asked only when a rule needs them.
   */
  readonly existing?: ((namespace: string) => readonly Resource[] | Promise<readonly Resource[]>) | undefined;
}

/** Where a diagnostic is, for people: `at spec.port`. */
function pathText(d: Diagnostic): string {
  return d.path !== undefined && d.path.length > 0 ? ` at ${formatPath(d.path)}` : '';
}

/** One diagnostic as `ward check` prints it, without the file position, with the field's path. */
export function formatAdmissionDiagnostic(d: Diagnostic): string {
  const r = d.resource;
  const res = r !== undefined ? ` [${r.kind} ${r.namespace ? `${r.namespace}/` : ''}${r.name}]` : '';
  const hint = d.hint !== undefined ? ` (hint: ${d.hint})` : '';
  return `${d.severity} ${d.code} ${d.message}${res}${pathText(d)}${hint}`;
}

/** The validating webhook's answer to one request. */
export async function handleValidate(request: AdmissionRequest, opts: ValidateOptions = {}): Promise<AdmissionResponse> {
  const { uid } = request;
  if (request.operation === 'DELETE' || request.operation === 'CONNECT' || request.subResource !== undefined) return allow(uid);
  if (!isRecord(request.object)) return deny(uid, 400, `${request.operation} of ${request.kind.kind} without an object`);
  const object = withNamespace(request.object, request.namespace);
  const document = documentFromObject(object, '<admission>');
  const version = opts.version;
  const existing = isLinkerdAtMost217(version) && opts.existing !== undefined ? await opts.existing(request.namespace ?? 'default') : [];
  const result = admitDocuments([document], { existing, version });
  const entry = result.documents[0]?.entry;
  // A kind ward does not read.
  if (entry === undefined) return allow(uid);
  const diagnostics = [...entry.diagnostics].sort(compareDiagnostics);
  if (entry.admitted) return allow(uid, diagnostics.filter((d) => d.severity !== 'info').map(formatAdmissionDiagnostic));
  const errors = diagnostics.filter((d) => d.severity === 'error');
  const decoded = decodeResource(document).status === 'ok';
  const shown = errors.length > 0 ? errors : diagnostics;
  return deny(uid, decoded ? 422 : 400, shown.map(formatAdmissionDiagnostic).join('; '));
}

/** The object with the request's namespace when it names none (decoding defaults to `default`). */
function withNamespace(object: Record<string, unknown>, namespace: string | undefined): Record<string, unknown> {
  const meta = isRecord(object.metadata) ? object.metadata : undefined;
  if (namespace === undefined || (meta !== undefined && typeof meta.namespace === 'string' && meta.namespace !== '')) return object;
  return { ...object, metadata: { ...meta, namespace } };
}

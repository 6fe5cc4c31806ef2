/**
 * admission.k8s.io/v1 AdmissionReview as the API server sends it to a webhook and expects it
 * back: reading a request out of a parsed body (every problem a precise message, never a throw)
 * and wrapping a response.
 */

/** `group/version/kind` of the object under review (group '' for core kinds). */
export interface GroupVersionKind {
  readonly group: string;
  readonly version: string;
  readonly kind: string;
}

/** The parts of `AdmissionReview.request` the webhooks read. */
export interface AdmissionRequest {
  readonly uid: string;
  readonly kind: GroupVersionKind;
  /** `pods/status` and the like; undefined for the object itself. */
  readonly subResource?: string | undefined;
  readonly namespace?: string | undefined;
  readonly name?: string | undefined;
  readonly operation: 'CREATE' | 'UPDATE' | 'DELETE' | 'CONNECT';
  readonly object?: unknown;
  readonly oldObject?: unknown;
  readonly dryRun: boolean;
}

/** `AdmissionReview.response`. */
export interface AdmissionResponse {
  readonly uid: string;
  readonly allowed: boolean;
  /** Why a request is denied (`code` 400 for objects that do not decode, 422 for rule violations). */
  readonly status?: { readonly code: number; readonly reason?: string; readonly message: string } | undefined;
  readonly patchType?: 'JSONPatch' | undefined;
  /** base64 of the JSON Patch. */
  readonly patch?: string | undefined;
  /** Shown by kubectl as `Warning: …`. */
  readonly warnings?: readonly string[] | undefined;
}

/** The review sent back. */
export interface AdmissionReviewResponse {
  readonly apiVersion: 'admission.k8s.io/v1';
  readonly kind: 'AdmissionReview';
  readonly response: AdmissionResponse;
}

const OPERATIONS = new Set(['CREATE', 'UPDATE', 'DELETE', 'CONNECT']);

/** Reads the request of a parsed AdmissionReview body. */
export function parseAdmissionReview(body: unknown): { ok: true; request: AdmissionRequest } | { ok: false; message: string } {
  if (!isRecord(body)) return { ok: false, message: 'the body is not a JSON object' };
  if (body.kind !== 'AdmissionReview') return { ok: false, message: `kind is ${JSON.stringify(body.kind)}, not "AdmissionReview"` };
  if (body.apiVersion !== 'admission.k8s.io/v1') {
    return { ok: false, message: `apiVersion is ${JSON.stringify(body.apiVersion)}; this webhook speaks admission.k8s.io/v1` };
  }
  const r = body.request;
  if (!isRecord(r)) return { ok: false, message: 'request is missing' };
  if (typeof r.uid !== 'string' || r.uid === '') return { ok: false, message: 'request.uid is missing' };
  const kind = r.kind;
  if (!isRecord(kind) || typeof kind.kind !== 'string' || typeof kind.version !== 'string' || (kind.group !== undefined && typeof kind.group !== 'string')) {
    return { ok: false, message: 'request.kind is not {group, version, kind}' };
  }
  if (typeof r.operation !== 'string' || !OPERATIONS.has(r.operation)) {
    return { ok: false, message: `request.operation ${JSON.stringify(r.operation)} is not CREATE, UPDATE, DELETE or CONNECT` };
  }
  const text = (v: unknown) => (typeof v === 'string' && v !== '' ? v : undefined);
  return {
    ok: true,
    request: {
      uid: r.uid,
      kind: { group: typeof kind.group === 'string' ? kind.group : '', version: kind.version, kind: kind.kind },
      subResource: text(r.subResource),
      namespace: text(r.namespace),
      name: text(r.name),
      operation: r.operation as AdmissionRequest['operation'],
      object: r.object ?? undefined,
      oldObject: r.oldObject ?? undefined,
      dryRun: r.dryRun === true,
    },
  };
}

/** Wraps a response into the review the API server expects. */
export function reviewOf(response: AdmissionResponse): AdmissionReviewResponse {
  return { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', response };
}

/** Admits without changes. */
export function allow(uid: string, warnings?: readonly string[]): AdmissionResponse {
  return { uid, allowed: true, ...(warnings !== undefined && warnings.length > 0 ? { warnings } : {}) };
}

/** Denies with an HTTP-like code and a message. */
export function deny(uid: string, code: number, message: string): AdmissionResponse {
  return { uid, allowed: false, status: { code, reason: code === 422 ? 'Invalid' : 'BadRequest', message } };
}

/** A JSON object. */
export function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * Path access into untyped JSON values for the api tests (test support only), so tests can
 * inspect and edit proto3 JSON without `any`.
 */

/** A step into an object (key) or array (index). */
export type JsonStep = string | number;

function step(value: unknown, key: JsonStep): unknown {
  if (typeof value !== 'object' || value === null) return undefined;
  return (value as Record<JsonStep, unknown>)[key];
}

/** The value at `path`, or undefined when any step is missing. */
export function jsonAt(value: unknown, ...path: JsonStep[]): unknown {
  return path.reduce(step, value);
}

function parentOf(value: unknown, path: readonly JsonStep[]): { parent: Record<JsonStep, unknown>; key: JsonStep } {
  const key = path.at(-1);
  const parent = jsonAt(value, ...path.slice(0, -1));
  if (key === undefined || typeof parent !== 'object' || parent === null) throw new Error(`no value at ${path.join('.')}`);
  return { parent: parent as Record<JsonStep, unknown>, key };
}

/** Sets the value at `path` (the parent must exist). */
export function jsonSet(value: unknown, path: readonly JsonStep[], v: unknown): void {
  const { parent, key } = parentOf(value, path);
  parent[key] = v;
}

/** Deletes the value at `path` (the parent must exist). */
export function jsonDelete(value: unknown, path: readonly JsonStep[]): void {
  const { parent, key } = parentOf(value, path);
  delete parent[key];
}

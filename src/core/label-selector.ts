/**
 * Kubernetes label selectors with upstream's evaluation quirks (POLICY-SEMANTICS §1.1): all
 * `matchLabels` and all `matchExpressions` must hold; an absent or empty selector selects
 * everything; an expression whose `values` presence does not fit its operator never matches.
 */

/** One `matchExpressions` entry as written (values may be absent). */
export interface LabelSelectorRequirement {
  readonly key: string;
  readonly operator: string;
  readonly values?: readonly string[] | undefined;
}

/** A label selector as written in a manifest. */
export interface LabelSelector {
  readonly matchLabels?: Readonly<Record<string, string>> | undefined;
  readonly matchExpressions?: readonly LabelSelectorRequirement[] | undefined;
}

/** Labels of an object. */
export type Labels = Readonly<Record<string, string>>;

function requirementMatches(req: LabelSelectorRequirement, labels: Labels): boolean {
  const has = Object.hasOwn(labels, req.key);
  switch (req.operator) {
    case 'In':
      if (req.values === undefined) return false;
      return has && req.values.includes(labels[req.key] as string);
    case 'NotIn':
      if (req.values === undefined) return false;
      return !has || !req.values.includes(labels[req.key] as string);
    case 'Exists':
      return req.values === undefined && has;
    case 'DoesNotExist':
      return req.values === undefined && !has;
    default:
      return false;
  }
}

/** True when `selector` selects an object with `labels`. */
export function selectorMatches(selector: LabelSelector | undefined, labels: Labels): boolean {
  if (selector === undefined) return true;
  const ml = selector.matchLabels;
  if (ml !== undefined) {
    for (const k in ml) {
      if (!Object.hasOwn(ml, k)) continue;
      if (!Object.hasOwn(labels, k) || labels[k] !== ml[k]) return false;
    }
  }
  const me = selector.matchExpressions;
  if (me !== undefined) {
    for (let i = 0; i < me.length; i++) if (!requirementMatches(me[i] as LabelSelectorRequirement, labels)) return false;
  }
  return true;
}

/** Explains why `selector` does not select `labels` (first failing term), or undefined when it does. */
export function selectorMismatch(selector: LabelSelector | undefined, labels: Labels): string | undefined {
  if (selector === undefined) return undefined;
  for (const [k, v] of Object.entries(selector.matchLabels ?? {})) {
    if (!Object.hasOwn(labels, k)) return `label ${k} is absent (want ${k}=${v})`;
    if (labels[k] !== v) return `label ${k}=${labels[k]} (want ${v})`;
  }
  for (const req of selector.matchExpressions ?? []) {
    if (!requirementMatches(req, labels)) {
      const vals = req.values === undefined ? '' : ` [${req.values.join(', ')}]`;
      return `expression ${req.key} ${req.operator}${vals} does not hold`;
    }
  }
  return undefined;
}

import type { Config, ModelConfig, SafetyConfig } from "./schema";

/** What a reloaded configuration changed, by kind: the ids added, removed and changed. */
export interface ConfigChanges {
  models: { added: string[]; removed: string[]; changed: string[] };
  plans: { added: string[]; removed: string[]; changed: string[] };
  /** The red-line rules or the external check changed. */
  safety: boolean;
}

function byId<T extends { id: string }>(before: readonly T[], after: readonly T[], same: (a: T, b: T) => boolean) {
  const old = new Map(before.map((item) => [item.id, item]));
  const added: string[] = [];
  const changed: string[] = [];
  for (const item of after) {
    const previous = old.get(item.id);
    if (!previous) added.push(item.id);
    else if (!same(previous, item)) changed.push(item.id);
  }
  const kept = new Set(after.map((item) => item.id));
  return { added, removed: before.filter((item) => !kept.has(item.id)).map((item) => item.id), changed };
}

/** A safety configuration as comparable data: its patterns as their source and flags. */
function safetyShape(safety: SafetyConfig): string {
  return JSON.stringify(safety, (_key, value: unknown) => (value instanceof RegExp ? `/${value.source}/${value.flags}` : value));
}

/** What `after` changes of `before`. */
export function configChanges(before: Config, after: Config): ConfigChanges {
  return {
    models: byId(before.models, after.models, Bun.deepEquals),
    plans: byId(before.plans, after.plans, Bun.deepEquals),
    safety: safetyShape(before.safety) !== safetyShape(after.safety),
  };
}

/** Whether the changes change anything. */
export function anyChange(changes: ConfigChanges): boolean {
  const { models, plans } = changes;
  return changes.safety || [models, plans].some((kind) => kind.added.length + kind.removed.length + kind.changed.length > 0);
}

type AuditedChanges = Record<string, [unknown, unknown]>;

/**
 * Items by id: an added one as [null, it], a removed one as [it, null], a changed one field by field. `shown` is an
 * item as the trail may show it; a field whose change it hides is recorded as changed, without its values.
 */
function itemChanges<T extends { id: string }>(
  kind: string,
  before: readonly T[],
  after: readonly T[],
  entries: AuditedChanges,
  shown: (item: T) => T = (item) => item,
): void {
  const old = new Map(before.map((item) => [item.id, item]));
  for (const item of after) {
    const previous = old.get(item.id);
    old.delete(item.id);
    if (!previous) {
      entries[`${kind} ${item.id}`] = [null, shown(item)];
      continue;
    }
    const fields = new Set([...Object.keys(previous), ...Object.keys(item)]) as Set<keyof T & string>;
    for (const field of fields) {
      if (Bun.deepEquals(previous[field], item[field])) continue;
      const [was, is] = [shown(previous)[field] ?? null, shown(item)[field] ?? null];
      entries[`${kind} ${item.id} ${field}`] = Bun.deepEquals(was, is) ? ["(hidden)", "(hidden, changed)"] : [was, is];
    }
  }
  for (const [id, item] of old) entries[`${kind} ${id}`] = [shown(item), null];
}

/** A model as the audit trail shows it: a header's value may be a credential of the operator's own, so only its name. */
function shownModel(model: ModelConfig): ModelConfig {
  if (Object.keys(model.headers).length === 0) return model;
  return { ...model, headers: Object.fromEntries(Object.keys(model.headers).map((name) => [name, "(hidden)"])) };
}

/** The red-line settings as the audit trail shows them: whether on, the external check's address, the rules' ids. */
function safetySummary(safety: SafetyConfig): Record<string, unknown> {
  return { enabled: safety.enabled, moderation: safety.moderation?.url ?? null, rules: safety.rules.map((rule) => rule.id) };
}

/**
 * What `after` changes of `before`, as the audit trail records a change (field: [old, new]): models and plans added,
 * removed, and changed field by field; the red-line settings in summary. Null when nothing changed.
 */
export function auditedChanges(before: Config, after: Config): AuditedChanges | null {
  const entries: AuditedChanges = {};
  itemChanges("model", before.models, after.models, entries, shownModel);
  itemChanges("plan", before.plans, after.plans, entries);
  if (safetyShape(before.safety) !== safetyShape(after.safety)) entries.safety = [safetySummary(before.safety), safetySummary(after.safety)];
  return Object.keys(entries).length > 0 ? entries : null;
}

import type { Config, ModelConfig, SafetyConfig } from "./schema";

/** The ids of one kind of item a reloaded configuration added, removed and changed. */
export interface ItemChanges {
  added: string[];
  removed: string[];
  changed: string[];
}

/** What a reloaded configuration changed, by kind. */
export interface ConfigChanges {
  models: ItemChanges;
  plans: ItemChanges;
  /** The red-line rules or the external check changed. */
  safety: boolean;
  /** The console's settings changed (whether anyone may sign up). */
  console: boolean;
  /** How long ledger rows are kept changed. */
  ledger: boolean;
}

/** A change as the audit trail records it: field → [old, new]. */
type AuditedChanges = Record<string, [unknown, unknown]>;

/**
 * Compares items by id: the ids added, removed and changed, and into `audited` an added one as [null, it], a removed
 * one as [it, null], a changed one field by field. `shown` is an item as the trail may show it; a field whose change
 * it hides is recorded as changed, without its values.
 */
function compareItems<T extends { id: string }>(
  kind: string,
  before: readonly T[],
  after: readonly T[],
  audited: AuditedChanges,
  shown: (item: T) => T = (item) => item,
): ItemChanges {
  const changes: ItemChanges = { added: [], removed: [], changed: [] };
  const old = new Map(before.map((item) => [item.id, item]));
  for (const item of after) {
    const previous = old.get(item.id);
    old.delete(item.id);
    if (!previous) {
      changes.added.push(item.id);
      audited[`${kind} ${item.id}`] = [null, shown(item)];
      continue;
    }
    const fields = new Set([...Object.keys(previous), ...Object.keys(item)]) as Set<keyof T & string>;
    let differs = false;
    for (const field of fields) {
      if (Bun.deepEquals(previous[field], item[field])) continue;
      differs = true;
      const [was, is] = [shown(previous)[field] ?? null, shown(item)[field] ?? null];
      audited[`${kind} ${item.id} ${field}`] = Bun.deepEquals(was, is) ? ["(hidden)", "(hidden, changed)"] : [was, is];
    }
    if (differs) changes.changed.push(item.id);
  }
  for (const [id, item] of old) {
    changes.removed.push(id);
    audited[`${kind} ${id}`] = [shown(item), null];
  }
  return changes;
}

/** A model as the audit trail shows it: a header's value may be a credential of the operator's own, so only its name. */
function shownModel(model: ModelConfig): ModelConfig {
  if (Object.keys(model.headers).length === 0) return model;
  return { ...model, headers: Object.fromEntries(Object.keys(model.headers).map((name) => [name, "(hidden)"])) };
}

/** A safety configuration as comparable data: its patterns as their source and flags. */
function safetyShape(safety: SafetyConfig): string {
  return JSON.stringify(safety, (_key, value: unknown) => (value instanceof RegExp ? `/${value.source}/${value.flags}` : value));
}

/** The red-line settings as the audit trail shows them: whether on, the external check's address, the rules' ids. */
function safetySummary(safety: SafetyConfig): Record<string, unknown> {
  return { enabled: safety.enabled, moderation: safety.moderation?.url ?? null, rules: safety.rules.map((rule) => rule.id) };
}

/**
 * What `after` changes of `before`: the ids of models and plans added, removed and changed, and whether the red-line
 * settings changed; and the same as the audit trail records it (null when nothing changed): models and plans field
 * by field, the red-line settings in summary.
 */
export function configChanges(before: Config, after: Config): { changes: ConfigChanges; audited: AuditedChanges | null } {
  const audited: AuditedChanges = {};
  const models = compareItems("model", before.models, after.models, audited, shownModel);
  const plans = compareItems("plan", before.plans, after.plans, audited);
  const safety = safetyShape(before.safety) !== safetyShape(after.safety);
  if (safety) audited.safety = [safetySummary(before.safety), safetySummary(after.safety)];
  const console = before.console.signUp !== after.console.signUp;
  if (console) audited["console.signUp"] = [before.console.signUp, after.console.signUp];
  const ledger = before.ledger.retentionDays !== after.ledger.retentionDays;
  if (ledger) audited["ledger.retentionDays"] = [before.ledger.retentionDays ?? null, after.ledger.retentionDays ?? null];
  return { changes: { models, plans, safety, console, ledger }, audited: Object.keys(audited).length > 0 ? audited : null };
}

/** Whether the changes change anything. */
export function anyChange(changes: ConfigChanges): boolean {
  const { models, plans } = changes;
  return (
    changes.safety || changes.console || changes.ledger || [models, plans].some((kind) => kind.added.length + kind.removed.length + kind.changed.length > 0)
  );
}

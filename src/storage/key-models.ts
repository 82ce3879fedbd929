// A key's models as both databases store them: a JSON array of model ids in a text column, null for every model of
// its plan. Each repository turns them into a list on the way out and into text on the way in.

/** The column's text of a key's models. */
export function modelsText(models: readonly string[] | null): string | null {
  return models === null ? null : JSON.stringify(models);
}

/** A key's models read back; text that is not a list of ids (written by hand) allows no model rather than every one. */
export function modelsOf(text: string | null): string[] | null {
  if (text === null) return null;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return [];
  }
  return Array.isArray(parsed) && parsed.every((id) => typeof id === "string") ? parsed : [];
}

/** A key's row as read, its models' text read back as a list. */
export function withModelList<Row extends { models: string | null }>(row: Row): Omit<Row, "models"> & { models: string[] | null } {
  return { ...row, models: modelsOf(row.models) };
}

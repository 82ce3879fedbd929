// A key's models and networks, and an organization's networks, as both databases store them: each a JSON array of
// strings in a text column, null for no restriction (every model of its plan; anywhere). Each repository turns them
// into lists on the way out and into text on the way in.

/** The column's text of a key's list. */
export function listText(list: readonly string[] | null): string | null {
  return list === null ? null : JSON.stringify(list);
}

/** A key's list read back; text that is not a list of strings (written by hand) allows nothing rather than everything. */
export function listOf(text: string | null): string[] | null {
  if (text === null) return null;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return [];
  }
  return Array.isArray(parsed) && parsed.every((entry) => typeof entry === "string") ? parsed : [];
}

/** The lists of a key's row as stored. */
export interface KeyListColumns {
  models: string | null;
  networks: string | null;
}

/** A key's lists as the application holds them. */
export interface KeyLists {
  models: string[] | null;
  networks: string[] | null;
}

/** A key's row as read, its lists' text read back. */
export function withKeyLists<Row extends KeyListColumns>(row: Row): Omit<Row, keyof KeyListColumns> & KeyLists {
  return { ...row, models: listOf(row.models), networks: listOf(row.networks) };
}

/** The columns of a key's lists, as written. */
export function keyListColumns(lists: KeyLists): KeyListColumns {
  return { models: listText(lists.models), networks: listText(lists.networks) };
}

/** An organization's row as read, its networks' text read back. */
export function withNetworkList<Row extends { networks: string | null }>(row: Row): Omit<Row, "networks"> & { networks: string[] | null } {
  return { ...row, networks: listOf(row.networks) };
}

/** A key's credentials as read: its lists and its organization's networks read back. */
export function withCredentialLists<Row extends KeyListColumns & { organizationNetworks: string | null }>(
  row: Row,
): Omit<Row, keyof KeyListColumns | "organizationNetworks"> & KeyLists & { organizationNetworks: string[] | null } {
  const { models, networks, organizationNetworks, ...rest } = row;
  return { ...rest, models: listOf(models), networks: listOf(networks), organizationNetworks: listOf(organizationNetworks) };
}

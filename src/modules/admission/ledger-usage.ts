import type { KeyRepository, LimitedKey, UsageRepository } from "../../storage/types";
import { startOfMonth } from "../../usage-periods";
import type { AdmissionStore } from "./store";

/**
 * Loads the usage the ledger recorded (its per-minute and per-month aggregates) into the admission store: every
 * organization, or one. A restart then neither forgets nor double-counts, and its cost does not grow with the
 * ledger's history.
 */
export async function restoreFromLedger(store: AdmissionStore, usage: UsageRepository, now: number, organizationId?: string): Promise<void> {
  const recorded = await usage.read(now, organizationId);
  if (organizationId !== undefined && !recorded.has(organizationId)) recorded.set(organizationId, { buckets: [], monthTokens: 0 });
  for (const [id, { buckets, monthTokens }] of recorded) await store.restore(id, buckets, monthTokens, startOfMonth(now));
}

/** Loads one key's usage from its ledger rows into the admission store, as its own subject. */
export async function restoreKeyFromLedger(
  store: AdmissionStore,
  usage: UsageRepository,
  key: { id: string; organizationId: string },
  now: number,
): Promise<void> {
  const { buckets, monthTokens } = await usage.keyUsage(key.id, now);
  await store.restore(key.organizationId, buckets, monthTokens, startOfMonth(now), key.id);
}

/** A key's caps as one string, to tell whether they changed. */
function signature(key: LimitedKey): string {
  return `${key.maxConcurrency}/${key.tokensPer5h}/${key.tokensPerMonth}/${key.requestsPerMinute}`;
}

/**
 * Loads the usage of the keys with caps into the admission store: every one when `known` is empty (start-up, a
 * rebuild), otherwise those whose caps are new or changed since `known`, or whose organization's usage was reset.
 * Returns the caps now known, for the next call.
 */
export async function restoreLimitedKeys(
  store: AdmissionStore,
  keys: KeyRepository,
  usage: UsageRepository,
  now: number,
  known: ReadonlyMap<string, string> = new Map(),
  resetOrganizations: ReadonlySet<string> = new Set(),
): Promise<Map<string, string>> {
  const current = new Map<string, string>();
  for (const key of await keys.limited()) {
    current.set(key.id, signature(key));
    if (known.get(key.id) === signature(key) && !resetOrganizations.has(key.organizationId)) continue;
    await restoreKeyFromLedger(store, usage, key, now);
  }
  return current;
}

import type { UsageRepository } from "../../storage/types";
import { startOfMonth } from "./month";
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

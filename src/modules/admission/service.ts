import type { LedgerStore, Storage } from "../../storage/types";
import type { AuditActor, AuditLog } from "../audit/service";
import { restoreFromLedger, restoreKeyFromLedger, restoreLimitedKeys } from "./ledger-usage";
import { MemoryAdmissionStore } from "./memory-store";
import { minuteMs } from "./request-rate";
import type { AdmissionStore } from "./store";

const pruneEveryMs = 3_600_000;

/**
 * Keeps one process's admission store in step with the database (SQLite mode): rebuilt from the ledger at start,
 * and an organization's usage reloaded when an operator resets it (from the CLI, in another process) before its
 * next request. In shared mode Redis holds the state for every instance and whoever resets restores it there.
 */
export async function syncAdmissionWithLedger(store: AdmissionStore, storage: Storage, ledger: LedgerStore, clock: () => number): Promise<void> {
  await storage.usage.prune(clock());
  setInterval(() => void storage.usage.prune(clock()).catch(() => {}), pruneEveryMs).unref();
  if (storage.kind !== "sqlite") return;
  await restoreFromLedger(store, storage.usage, clock());
  if (store instanceof MemoryAdmissionStore) await restoreRequestRates(store, storage, clock());
  let limitedKeys = await restoreLimitedKeys(store, storage.keys, storage.usage, clock());
  let resets = await storage.usage.resets();
  storage.changes.onChange(async () => {
    const latest = await storage.usage.resets();
    const resetNow = new Set<string>();
    for (const [organizationId, resetAt] of latest) {
      if (resets.get(organizationId) === resetAt) continue;
      // Rows settled in memory but not yet committed must be in the database before it is read back.
      await ledger.flush();
      await restoreFromLedger(store, storage.usage, clock(), organizationId);
      resetNow.add(organizationId);
    }
    resets = latest;
    // Keys given caps (or new caps) by another process start from what their ledger rows say.
    await ledger.flush();
    limitedKeys = await restoreLimitedKeys(store, storage.keys, storage.usage, clock(), limitedKeys, resetNow);
  });
}

/** The last minute's recorded requests, taken from the requests-per-minute buckets of a store started afresh. */
export async function restoreRequestRates(store: MemoryAdmissionStore, storage: Storage, now: number): Promise<void> {
  const since = now - minuteMs;
  const pacedKeys = new Set((await storage.keys.limited()).filter((key) => key.requestsPerMinute !== null).map((key) => key.id));
  store.restoreRequests(await storage.usage.startsSince(since), since, pacedKeys);
}

/**
 * An operator's usage reset, from the CLI or the console: recorded in the database (usage that ended before now no
 * longer counts, also after restarts), then in the shared admission state, then announced to every instance.
 */
export async function resetUsage(
  storage: Storage,
  organization: { id: string; name: string },
  now: number,
  audit: { log: AuditLog; actor: AuditActor },
  sharedStore?: AdmissionStore,
): Promise<void> {
  await storage.usage.reset(organization.id, now);
  if (sharedStore) {
    await restoreFromLedger(sharedStore, storage.usage, now, organization.id);
    for (const key of await storage.keys.limited()) {
      if (key.organizationId === organization.id) await restoreKeyFromLedger(sharedStore, storage.usage, key, now);
    }
  }
  await storage.changes.announce();
  await audit.log.record(audit.actor, "usage.reset", organization.name, { organizationId: organization.id, changes: { resetAt: [null, now] } });
}

import type { LedgerStore, Storage } from "../../storage/types";
import type { AuditActor, AuditLog } from "../audit/service";
import { restoreFromLedger } from "./ledger-usage";
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
  let resets = await storage.usage.resets();
  storage.changes.onChange(async () => {
    const latest = await storage.usage.resets();
    for (const [organizationId, resetAt] of latest) {
      if (resets.get(organizationId) === resetAt) continue;
      // Rows settled in memory but not yet committed must be in the database before it is read back.
      await ledger.flush();
      await restoreFromLedger(store, storage.usage, clock(), organizationId);
    }
    resets = latest;
  });
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
  if (sharedStore) await restoreFromLedger(sharedStore, storage.usage, now, organization.id);
  await storage.changes.announce();
  await audit.log.record(audit.actor, "usage.reset", organization.name, { organizationId: organization.id, changes: { resetAt: [null, now] } });
}

import type { DatabaseHandle } from "../../db/client";
import type { Ledger } from "../../ledger/ledger";
import { pruneUsageMinutes, readUsageResets, restoreFromLedger } from "./ledger-usage";
import type { AdmissionStore } from "./store";

/**
 * Keeps an admission store in step with the database: rebuilt from the ledger at start, and an organization's
 * usage reloaded when an operator resets it (from the CLI, in another process) before its next request.
 */
export function syncAdmissionWithLedger(store: AdmissionStore, database: DatabaseHandle, ledger: Ledger, clock: () => number): void {
  pruneUsageMinutes(database.sqlite, clock());
  setInterval(() => pruneUsageMinutes(database.sqlite, clock()), 3_600_000).unref();
  restoreFromLedger(store, database.sqlite, clock());
  let resets = readUsageResets(database.sqlite);
  database.onExternalChange(() => {
    const latest = readUsageResets(database.sqlite);
    for (const [organizationId, resetAt] of latest) {
      if (resets.get(organizationId) === resetAt) continue;
      // Rows settled in memory but not yet committed must be in the database before it is read back.
      ledger.flush();
      restoreFromLedger(store, database.sqlite, clock(), organizationId);
    }
    resets = latest;
  });
}

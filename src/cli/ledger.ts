import { LedgerRetention, retentionCutoff } from "../ledger/retention";
import { withCliContext } from "./context";
import { CommandError, UsageError, parseCommand } from "./usage";

/**
 * `sluice ledger prune [--days N]`: deletes now the ledger's rows past the retention (`[ledger] retention_days`, or
 * `--days`), as a server does every hour, and records it in the audit trail.
 */
export async function runLedger(args: string[]): Promise<number> {
  const [subcommand, ...rest] = args;
  if (subcommand !== "prune") throw new UsageError(`ledger: unknown subcommand "${subcommand ?? ""}" (prune)`);
  const { values } = parseCommand(rest, { days: { type: "string" } }, 0);
  const days = values.days === undefined ? undefined : Number(values.days);
  if (days !== undefined && !(Number.isInteger(days) && days >= 1 && days <= 36500)) {
    throw new UsageError(`--days must be a whole number from 1 to 36500, got "${values.days}"`);
  }
  await withCliContext(async (context) => {
    const retentionDays = days ?? context.config.ledger.retentionDays;
    if (retentionDays === undefined) throw new CommandError("no retention to apply: set [ledger] retention_days in the configuration, or give --days");
    // One moment for the whole run, so that the time it names is the one it deleted before.
    const now = Date.now();
    const before = retentionCutoff(now, retentionDays);
    const retention = new LedgerRetention({ requestLog: context.storage.requestLog, retentionDays: () => retentionDays, clock: () => now });
    let rows: number;
    try {
      rows = await retention.run();
    } catch (error) {
      throw new CommandError(`the ledger could not be pruned (run it again to go on): ${(error as Error).message}`);
    }
    const endedBefore = new Date(before).toISOString();
    if (rows > 0)
      await context.audit.record(context.actor, "ledger.pruned", "usage_ledger", { changes: { rows: [null, rows], endedBefore: [null, endedBefore] } });
    console.log(`deleted ${rows} ledger rows of requests that ended before ${endedBefore}`);
  });
  return 0;
}

import { readLedgerUsage, writeUsageReset } from "../modules/admission/ledger-usage";
import { MemoryAdmissionStore } from "../modules/admission/memory-store";
import { startOfMonth } from "../modules/admission/month";
import { formatTime, openCliContext } from "./context";
import { UsageError, parseCommand } from "./usage";

/** `sluice usage --org NAME` and `sluice usage reset --org NAME`. */
export function runUsage(args: string[]): void {
  const reset = args[0] === "reset";
  const { values } = parseCommand(reset ? args.slice(1) : args, { org: { type: "string" } }, 0);
  if (!values.org) throw new UsageError("--org NAME is required");
  const context = openCliContext();
  const organization = context.organizations.requireByName(values.org);
  const now = Date.now();
  if (reset) {
    writeUsageReset(context.database.sqlite, organization.id, now);
    console.log(`${organization.name}\tusage reset\t${formatTime(now)}`);
    return;
  }
  const plan = context.config.plans.find((candidate) => candidate.id === organization.plan);
  if (!plan) throw new UsageError(`organization "${organization.name}" has plan "${organization.plan}", which the configuration does not define`);
  // The same rules as the server: the ledger replayed into an admission store (without the requests in flight).
  const store = new MemoryAdmissionStore();
  const usage = readLedgerUsage(context.database.sqlite, now, organization.id).get(organization.id);
  store.restore(organization.id, usage?.buckets ?? [], usage?.monthTokens ?? 0, startOfMonth(now));
  const snapshot = store.snapshot(organization.id, plan, now);
  const show = (value: number | undefined) => (value === undefined ? "unlimited" : String(value));
  console.log(["window", "used", "limit", "remaining", "frees_up"].join("\t"));
  for (const [name, window] of [["5h", snapshot.fiveHours], ["month", snapshot.month]] as const) {
    console.log([name, window.used, show(window.limit), show(window.remaining), formatTime(window.resetsAt)].join("\t"));
  }
}

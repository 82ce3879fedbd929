import { restoreFromLedger } from "../modules/admission/ledger-usage";
import { MemoryAdmissionStore } from "../modules/admission/memory-store";
import { RedisAdmissionStore } from "../modules/admission/redis-store";
import { resetUsage, restoreRequestRates } from "../modules/admission/service";
import type { UsageSnapshot } from "../modules/admission/store";
import { type ReportTotal, ReportRequestError, reportCsv, usageReport, type UsageReport } from "../modules/usage/report";
import { formatTime, withCliContext } from "./context";
import { UsageError, parseCommand } from "./usage";

/** `sluice usage report`: tokens by organization and model (or key) over a month or a span of hours. */
async function runReport(args: string[]): Promise<number> {
  const { values } = parseCommand(
    args,
    {
      month: { type: "string" },
      since: { type: "string" },
      until: { type: "string" },
      org: { type: "string" },
      by: { type: "string" },
      csv: { type: "boolean" },
    },
    0,
  );
  const organizationName = values.org;
  await withCliContext(async (context) => {
    const organization = organizationName === undefined ? undefined : await context.organizations.requireByName(organizationName);
    let report: UsageReport;
    try {
      report = await usageReport(context.storage.usage, values, Date.now(), organization?.id);
    } catch (error) {
      if (error instanceof ReportRequestError) throw new UsageError(`--${error.param}: ${error.message}`);
      throw error;
    }
    if (values.csv) {
      process.stdout.write(reportCsv(report));
      return;
    }
    console.log(`from ${formatTime(report.since)} to ${formatTime(report.until)} (UTC hours), tokens (prompt + completion) by ${report.by}`);
    console.log(["organization", report.by, "tokens", "prompt", "cached", "completion"].join("\t"));
    const kinds = (row: ReportTotal) => [row.tokens, row.promptTokens, row.cachedTokens, row.completionTokens];
    for (const row of report.rows) {
      console.log([row.organization, report.by === "key" ? `${row.group} (${row.keyId})` : row.group, ...kinds(row)].join("\t"));
    }
    console.log(["total", "", ...kinds(report.total)].join("\t"));
  });
  return 0;
}

/** `sluice usage --org NAME`, `sluice usage reset --org NAME` and `sluice usage report`. */
export async function runUsage(args: string[]): Promise<number> {
  if (args[0] === "report") return await runReport(args.slice(1));
  const reset = args[0] === "reset";
  const { values } = parseCommand(reset ? args.slice(1) : args, { org: { type: "string" } }, 0);
  if (!values.org) throw new UsageError("--org NAME is required");
  const organizationName = values.org;
  await withCliContext(async (context) => {
    const organization = await context.organizations.requireByName(organizationName);
    const now = Date.now();
    // Shared mode: the admission state every instance uses is in Redis, so this process reads and resets it there.
    const shared = context.redis ? new RedisAdmissionStore(context.redis, context.storage.usage, context.storage.keys) : undefined;
    try {
      if (reset) {
        await resetUsage(context.storage, organization, now, { log: context.audit, actor: context.actor }, shared);
        console.log(`${organization.name}\tusage reset\t${formatTime(now)}`);
        return;
      }
      const plan = context.config.plans.find((candidate) => candidate.id === organization.plan);
      if (!plan) throw new UsageError(`organization "${organization.name}" has plan "${organization.plan}", which the configuration does not define`);
      let snapshot: UsageSnapshot;
      if (shared) snapshot = await shared.snapshot(organization.id, plan, now);
      else {
        // The same rules as the server: the ledger replayed into an admission store (without the requests in flight).
        const store = new MemoryAdmissionStore();
        await restoreFromLedger(store, context.storage.usage, now, organization.id);
        await restoreRequestRates(store, context.storage, now);
        snapshot = store.snapshot(organization.id, plan, now);
      }
      const show = (value: number | undefined) => (value === undefined ? "unlimited" : String(value));
      console.log(["window", "used", "limit", "remaining", "frees_up"].join("\t"));
      for (const [name, window] of [
        ["5h", snapshot.fiveHours],
        ["month", snapshot.month],
      ] as const) {
        console.log([name, window.used, show(window.limit), show(window.remaining), formatTime(window.resetsAt)].join("\t"));
      }
      // Requests started in the bucket's reckoning (see request-rate.ts), and when it is full again.
      const requests = snapshot.requests;
      if (requests)
        console.log(["requests/min", requests.limit - requests.remaining, requests.limit, requests.remaining, formatTime(requests.fullAt)].join("\t"));
    } finally {
      shared?.close();
    }
  });
  return 0;
}

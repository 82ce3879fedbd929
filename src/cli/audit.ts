import { auditActions } from "../modules/audit/service";
import { parseTimeBound, timeBoundForms } from "../modules/keys/duration";
import { formatTime, withCliContext } from "./context";
import { UsageError, parseCommand } from "./usage";

/** `sluice audit [--since 7d] [--action A] [--org NAME] [--limit N]`: the audit trail, newest first. */
export async function runAudit(args: string[]): Promise<number> {
  const { values } = parseCommand(args, { since: { type: "string" }, action: { type: "string" }, org: { type: "string" }, limit: { type: "string" } }, 0);
  const since = parseTimeBound(values.since ?? "7d", Date.now());
  if (since === undefined) throw new UsageError(`--since must be ${timeBoundForms}; got "${values.since}"`);
  if (values.action !== undefined && !(auditActions as readonly string[]).includes(values.action))
    throw new UsageError(`--action must be one of ${auditActions.join(", ")}`);
  const limit = values.limit === undefined ? 200 : Number(values.limit);
  if (!Number.isInteger(limit) || limit < 1 || limit > 10_000) throw new UsageError("--limit must be from 1 to 10000");
  await withCliContext(async (context) => {
    const organization = values.org === undefined ? undefined : await context.organizations.requireByName(values.org);
    const entries = await context.audit.list({ since, action: values.action, organizationId: organization?.id, limit });
    console.log(["time", "actor", "action", "target", "changes"].join("\t"));
    for (const entry of entries) {
      const changes = entry.changes
        ? Object.entries(entry.changes)
            .map(([field, [before, after]]) => `${field}: ${JSON.stringify(before)} -> ${JSON.stringify(after)}`)
            .join("; ")
        : "-";
      console.log(
        [
          formatTime(entry.at),
          `${entry.actor} (${entry.address ? `${entry.actorKind}, ${entry.address}` : entry.actorKind})`,
          entry.action,
          entry.target,
          changes,
        ].join("\t"),
      );
    }
  });
  return 0;
}

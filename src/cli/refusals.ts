import { parseDuration } from "../modules/keys/duration";
import { formatTime, withCliContext } from "./context";
import { UsageError, parseCommand } from "./usage";

/** `sluice refusals [--since 24h]`: red-line refusals by rule, then the most recent ones. Never the text. */
export async function runRefusals(args: string[]): Promise<number> {
  const { values } = parseCommand(args, { since: { type: "string" } }, 0);
  const since = values.since ?? "24h";
  const windowMs = parseDuration(since);
  if (windowMs === undefined) throw new UsageError(`--since must look like 90s, 30m, 12h or 30d, got "${since}"`);
  await withCliContext(async (context) => {
    const from = Date.now() - windowMs;
    const byRule = await context.storage.usage.refusalsByRule(from);
    const names = new Map(context.config.safety.rules.map((rule) => [rule.id, rule.name]));
    console.log(["rule", "name", "refusals", "last"].join("\t"));
    for (const row of byRule) console.log([row.ruleId, names.get(row.ruleId) ?? "(no longer configured)", row.count, formatTime(row.last)].join("\t"));
    const recent = await context.storage.usage.recentRefusals(from, 50);
    if (recent.length === 0) return;
    console.log("");
    console.log(["time", "request_id", "organization", "model", "rule"].join("\t"));
    for (const row of recent) console.log([formatTime(row.endedAt), row.requestId, row.organization ?? "-", row.model, row.ruleId].join("\t"));
  });
  return 0;
}

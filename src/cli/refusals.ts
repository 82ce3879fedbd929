import { parseDuration } from "../modules/keys/duration";
import { formatTime, openCliContext } from "./context";
import { UsageError, parseCommand } from "./usage";

/** `sluice refusals [--since 24h]`: red-line refusals by rule, then the most recent ones. Never the text. */
export function runRefusals(args: string[]): void {
  const { values } = parseCommand(args, { since: { type: "string" } }, 0);
  const since = values.since ?? "24h";
  const windowMs = parseDuration(since);
  if (windowMs === undefined) throw new UsageError(`--since must look like 90s, 30m, 12h or 30d, got "${since}"`);
  const context = openCliContext();
  const from = Date.now() - windowMs;
  const byRule = context.database.sqlite
    .query<{ ruleId: string; count: number; last: number }, [number]>(
      `SELECT rule_id AS ruleId, count(*) AS count, max(ended_at) AS last FROM usage_ledger
        WHERE outcome = 'content_filter' AND ended_at >= ? GROUP BY rule_id ORDER BY count DESC, rule_id`,
    )
    .all(from);
  const names = new Map(context.config.safety.rules.map((rule) => [rule.id, rule.name]));
  console.log(["rule", "name", "refusals", "last"].join("\t"));
  for (const row of byRule) console.log([row.ruleId, names.get(row.ruleId) ?? "(no longer configured)", row.count, formatTime(row.last)].join("\t"));
  const recent = context.database.sqlite
    .query<{ endedAt: number; requestId: string; organization: string | null; model: string; ruleId: string }, [number]>(
      `SELECT l.ended_at AS endedAt, l.request_id AS requestId, o.name AS organization, l.model AS model, l.rule_id AS ruleId
         FROM usage_ledger l LEFT JOIN organizations o ON o.id = l.organization_id
        WHERE l.outcome = 'content_filter' AND l.ended_at >= ? ORDER BY l.ended_at DESC LIMIT 50`,
    )
    .all(from);
  if (recent.length === 0) return;
  console.log("");
  console.log(["time", "request_id", "organization", "model", "rule"].join("\t"));
  for (const row of recent) console.log([formatTime(row.endedAt), row.requestId, row.organization ?? "-", row.model, row.ruleId].join("\t"));
}

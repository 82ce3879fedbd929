import type { Database } from "bun:sqlite";
import { startOfMonth } from "./month";
import type { AdmissionStore, LedgerBucket } from "./store";
import { bucketMs, fiveHoursMs } from "./window";

export interface OrganizationUsage {
  buckets: LedgerBucket[];
  monthTokens: number;
}

const notResetClause = "(r.reset_at IS NULL OR l.ended_at > r.reset_at)";

/**
 * What the ledger says each organization used in the last 5 hours (per minute) and this month, ignoring rows
 * that ended before the organization's last reset. The in-memory admission state is rebuilt from this at start,
 * so a restart neither forgets nor double-counts.
 */
export function readLedgerUsage(sqlite: Database, now: number, organizationId?: string): Map<string, OrganizationUsage> {
  const onlyOne = organizationId === undefined ? "" : "AND l.organization_id = ?2";
  const windowRows = sqlite
    .query<{ organizationId: string; tokens: number; lastTime: number }, (string | number)[]>(
      `SELECT l.organization_id AS organizationId, sum(l.prompt_tokens + l.completion_tokens) AS tokens, max(l.ended_at) AS lastTime
         FROM usage_ledger l LEFT JOIN usage_resets r ON r.organization_id = l.organization_id
        WHERE l.ended_at > ?1 AND ${notResetClause} ${onlyOne}
        GROUP BY l.organization_id, l.ended_at / ${bucketMs}
        ORDER BY lastTime`,
    )
    .all(...[now - fiveHoursMs - bucketMs, ...(organizationId === undefined ? [] : [organizationId])]);
  const monthRows = sqlite
    .query<{ organizationId: string; tokens: number }, (string | number)[]>(
      `SELECT l.organization_id AS organizationId, sum(l.prompt_tokens + l.completion_tokens) AS tokens
         FROM usage_ledger l LEFT JOIN usage_resets r ON r.organization_id = l.organization_id
        WHERE l.ended_at >= ?1 AND ${notResetClause} ${onlyOne}
        GROUP BY l.organization_id`,
    )
    .all(...[startOfMonth(now), ...(organizationId === undefined ? [] : [organizationId])]);
  const usage = new Map<string, OrganizationUsage>();
  const entry = (id: string) => {
    let found = usage.get(id);
    if (!found) usage.set(id, (found = { buckets: [], monthTokens: 0 }));
    return found;
  };
  for (const row of windowRows) entry(row.organizationId).buckets.push({ tokens: row.tokens, lastTime: row.lastTime });
  for (const row of monthRows) entry(row.organizationId).monthTokens = row.tokens;
  return usage;
}

/** Loads the ledger's usage into the admission store: every organization, or one. */
export function restoreFromLedger(store: AdmissionStore, sqlite: Database, now: number, organizationId?: string): void {
  const usage = readLedgerUsage(sqlite, now, organizationId);
  if (organizationId !== undefined && !usage.has(organizationId)) usage.set(organizationId, { buckets: [], monthTokens: 0 });
  for (const [id, { buckets, monthTokens }] of usage) store.restore(id, buckets, monthTokens, startOfMonth(now));
}

/** Records an operator's reset: usage that ended before `at` no longer counts, also after a restart. */
export function writeUsageReset(sqlite: Database, organizationId: string, at: number): void {
  sqlite.run(
    "INSERT INTO usage_resets (organization_id, reset_at) VALUES (?1, ?2) ON CONFLICT(organization_id) DO UPDATE SET reset_at = excluded.reset_at",
    [organizationId, at],
  );
}

/** Every organization's last reset time. */
export function readUsageResets(sqlite: Database): Map<string, number> {
  const rows = sqlite.query<{ organizationId: string; resetAt: number }, []>("SELECT organization_id AS organizationId, reset_at AS resetAt FROM usage_resets").all();
  return new Map(rows.map((row) => [row.organizationId, row.resetAt]));
}

import type { Database } from "bun:sqlite";
import { monthOf, startOfMonth } from "./month";
import { addToMinuteSql, addToMonthSql } from "../../ledger/ledger-writer";
import type { AdmissionStore, LedgerBucket } from "./store";
import { bucketMs, fiveHoursMs } from "./window";

export interface OrganizationUsage {
  buckets: LedgerBucket[];
  monthTokens: number;
}

/**
 * What each organization used in the last 5 hours (per minute) and this month, from the aggregates the ledger
 * keeps beside its rows (usage_minutes, usage_months). The in-memory admission state is rebuilt from this at start,
 * so a restart neither forgets nor double-counts, and its cost does not grow with the ledger's history.
 */
export function readLedgerUsage(sqlite: Database, now: number, organizationId?: string): Map<string, OrganizationUsage> {
  const onlyOne = organizationId === undefined ? "" : "AND organization_id = ?2";
  const parameters = (first: number) => (organizationId === undefined ? [first] : [first, organizationId]);
  const windowRows = sqlite
    .query<{ organizationId: string; tokens: number; lastTime: number }, (string | number)[]>(
      `SELECT organization_id AS organizationId, tokens, last_time AS lastTime FROM usage_minutes
        WHERE minute >= ?1 ${onlyOne} ORDER BY last_time`,
    )
    .all(...parameters(Math.floor((now - fiveHoursMs) / bucketMs)));
  const monthRows = sqlite
    .query<{ organizationId: string; tokens: number }, (string | number)[]>(
      `SELECT organization_id AS organizationId, tokens FROM usage_months WHERE month = ?1 ${onlyOne}`,
    )
    .all(...parameters(monthOf(now)));
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

/** Loads the recorded usage into the admission store: every organization, or one. */
export function restoreFromLedger(store: AdmissionStore, sqlite: Database, now: number, organizationId?: string): void {
  const usage = readLedgerUsage(sqlite, now, organizationId);
  if (organizationId !== undefined && !usage.has(organizationId)) usage.set(organizationId, { buckets: [], monthTokens: 0 });
  for (const [id, { buckets, monthTokens }] of usage) store.restore(id, buckets, monthTokens, startOfMonth(now));
}

/** Drops minute aggregates that no window can need any more (older than 6 hours). */
export function pruneUsageMinutes(sqlite: Database, now: number): void {
  sqlite.run("DELETE FROM usage_minutes WHERE minute < ?", [Math.floor((now - fiveHoursMs - 3_600_000) / bucketMs)]);
}

/**
 * Records an operator's reset: usage that ended before `at` no longer counts, also after a restart. The
 * organization's aggregates are rebuilt from the ledger rows after the reset, in one transaction, so rows the
 * server commits meanwhile are neither lost nor counted twice.
 */
export function writeUsageReset(sqlite: Database, organizationId: string, at: number): void {
  sqlite.transaction(() => {
    sqlite.run(
      "INSERT INTO usage_resets (organization_id, reset_at) VALUES (?1, ?2) ON CONFLICT(organization_id) DO UPDATE SET reset_at = excluded.reset_at",
      [organizationId, at],
    );
    sqlite.run("DELETE FROM usage_minutes WHERE organization_id = ?", [organizationId]);
    sqlite.run("DELETE FROM usage_months WHERE organization_id = ?", [organizationId]);
    const rows = sqlite
      .query<{ tokens: number; endedAt: number }, [string, number]>(
        "SELECT prompt_tokens + completion_tokens AS tokens, ended_at AS endedAt FROM usage_ledger WHERE organization_id = ? AND ended_at > ?",
      )
      .all(organizationId, at);
    for (const row of rows) {
      sqlite.run(addToMinuteSql, [organizationId, Math.floor(row.endedAt / bucketMs), row.tokens, row.endedAt]);
      sqlite.run(addToMonthSql, [organizationId, monthOf(row.endedAt), row.tokens]);
    }
  })();
}

/** Every organization's last reset time. */
export function readUsageResets(sqlite: Database): Map<string, number> {
  const rows = sqlite.query<{ organizationId: string; resetAt: number }, []>("SELECT organization_id AS organizationId, reset_at AS resetAt FROM usage_resets").all();
  return new Map(rows.map((row) => [row.organizationId, row.resetAt]));
}

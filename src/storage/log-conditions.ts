// The WHERE clauses of the request log and the audit trail, written once for both dialects: Drizzle's operators
// are the same for SQLite and PostgreSQL, only the tables differ.
import { and, eq, gte, lt, lte, or, sql, type AnyColumn, type SQL } from "drizzle-orm";
import type { AuditFilter, RequestLogFilter } from "./types";

interface LedgerColumns {
  requestId: AnyColumn;
  organizationId: AnyColumn;
  keyId: AnyColumn;
  model: AnyColumn;
  outcome: AnyColumn;
  endedAt: AnyColumn;
}

/** Tells the planner that a condition holds for most rows (SQLite's likelihood(); PostgreSQL has statistics). */
export type CommonCondition = (condition: SQL) => SQL;

/** SQLite's planner, without statistics, takes an equality on a column without index for a selective one. */
export const sqliteCommon: CommonCondition = (condition) => sql`likelihood(${condition}, 0.9)`;

/** The request log's filter over usage_ledger; pair it with ORDER BY ended_at DESC, request_id DESC. */
export function requestLogConditions(ledger: LedgerColumns, filter: RequestLogFilter, common: CommonCondition = (condition) => condition): SQL | undefined {
  const conditions: (SQL | undefined)[] = [];
  if (filter.requestId !== undefined) conditions.push(eq(ledger.requestId, filter.requestId));
  if (filter.organizationId !== undefined) conditions.push(eq(ledger.organizationId, filter.organizationId));
  if (filter.keyId !== undefined) conditions.push(eq(ledger.keyId, filter.keyId));
  if (filter.model !== undefined) conditions.push(eq(ledger.model, filter.model));
  if (filter.outcome === "completed") {
    // Most rows: read in ended_at order and skip the others, rather than collect and sort them all.
    conditions.push(common(eq(ledger.outcome, filter.outcome)));
  } else if (filter.outcome !== undefined) {
    // The literal lets the planner use the partial index of the rare outcomes (a bound value alone does not).
    conditions.push(eq(ledger.outcome, filter.outcome), sql`${ledger.outcome} <> 'completed'`);
  }
  if (filter.since !== undefined) conditions.push(gte(ledger.endedAt, filter.since));
  if (filter.until !== undefined) conditions.push(lt(ledger.endedAt, filter.until));
  if (filter.after !== undefined) {
    // The `<=` alone bounds the index range; the OR then drops the rows of that millisecond already shown.
    conditions.push(lte(ledger.endedAt, filter.after.endedAt), or(lt(ledger.endedAt, filter.after.endedAt), lt(ledger.requestId, filter.after.requestId)));
  }
  return and(...conditions);
}

const requestLogFields = [
  "requestId",
  "startedAt",
  "endedAt",
  "organizationId",
  "keyId",
  "model",
  "outcome",
  "errorCode",
  "ruleId",
  "promptTokens",
  "completionTokens",
  "reasoningTokens",
  "cachedTokens",
  "quotaTokens",
  "firstTokenMs",
  "usageSource",
] as const;

type RequestLogField = (typeof requestLogFields)[number];

/** The columns a request log row shows, from either dialect's ledger table (its organization and key names join in). */
export function requestLogColumns<T extends Record<RequestLogField, AnyColumn>>(ledger: T): Pick<T, RequestLogField> {
  return Object.fromEntries(requestLogFields.map((field) => [field, ledger[field]])) as Pick<T, RequestLogField>;
}

interface AuditColumns {
  id: AnyColumn;
  at: AnyColumn;
  action: AnyColumn;
  actor: AnyColumn;
  organizationId: AnyColumn;
}

/** The audit trail's filter; pair it with ORDER BY id DESC (ids are time-ordered). */
export function auditConditions(audit: AuditColumns, filter: AuditFilter): SQL | undefined {
  const conditions: (SQL | undefined)[] = [];
  if (filter.since !== undefined) conditions.push(gte(audit.at, filter.since));
  if (filter.action !== undefined) conditions.push(eq(audit.action, filter.action));
  if (filter.actor !== undefined) conditions.push(eq(audit.actor, filter.actor));
  if (filter.organizationId !== undefined) conditions.push(eq(audit.organizationId, filter.organizationId));
  if (filter.before !== undefined) conditions.push(lt(audit.id, filter.before));
  return and(...conditions);
}

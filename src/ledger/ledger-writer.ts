import type { Database } from "bun:sqlite";
import type { LedgerRow } from "./ledger";
import { UsageFold } from "./usage-fold";

/** A row as it crosses to the writer thread: its 14 fields in a flat array (cheaper to copy than objects). */
export type LedgerValue = string | number | null;
const fieldsPerRow = 14;

/** Adds tokens to an organization's minute: (organization_id, minute, tokens, last ended_at). */
export const addToMinuteSql = `INSERT INTO usage_minutes (organization_id, minute, tokens, last_time) VALUES (?1, ?2, ?3, ?4)
  ON CONFLICT (organization_id, minute) DO UPDATE SET tokens = tokens + excluded.tokens, last_time = max(last_time, excluded.last_time)`;

/** Adds tokens to an organization's month: (organization_id, month, tokens). */
export const addToMonthSql = `INSERT INTO usage_months (organization_id, month, tokens) VALUES (?1, ?2, ?3)
  ON CONFLICT (organization_id, month) DO UPDATE SET tokens = tokens + excluded.tokens`;

/** Appends one row's fields to `values`, in the order of the INSERT below. */
export function encodeRow(row: LedgerRow, values: LedgerValue[]): void {
  values.push(
    row.requestId,
    row.organizationId,
    row.keyId,
    row.model,
    row.promptTokens,
    row.completionTokens,
    row.reasoningTokens,
    row.outcome,
    row.errorCode,
    row.ruleId,
    row.usageSource,
    row.startedAt,
    row.endedAt,
    row.firstTokenMs,
  );
}

/**
 * The writes of the request path: ledger rows with the usage aggregates beside them (usage_minutes, usage_months),
 * and keys' last-used times.
 */
export class LedgerWriter {
  private readonly write: (batches: LedgerValue[][]) => void;
  private readonly touch: (entries: [string, number][]) => void;

  constructor(sqlite: Database) {
    const insert = sqlite.query<unknown, LedgerValue[]>(
      `INSERT OR IGNORE INTO usage_ledger (request_id, organization_id, key_id, model, prompt_tokens, completion_tokens,
         reasoning_tokens, outcome, error_code, rule_id, usage_source, started_at, ended_at, first_token_ms)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    const addMinute = sqlite.query<unknown, [string, number, number, number]>(addToMinuteSql);
    const addMonth = sqlite.query<unknown, [string, number, number]>(addToMonthSql);
    const touchKey = sqlite.query<unknown, [number, string]>("UPDATE api_keys SET last_used_at = max(coalesce(last_used_at, 0), ?) WHERE id = ?");
    this.touch = sqlite.transaction((entries: [string, number][]) => {
      for (const [keyId, time] of entries) touchKey.run(time, keyId);
    });
    this.write = sqlite.transaction((batches: LedgerValue[][]) => {
      // The aggregates are summed here first: a busy batch of one organization is one upsert, not one per row.
      const fold = new UsageFold();
      for (const values of batches) {
        for (let start = 0; start < values.length; start += fieldsPerRow) {
          // Positional, without slicing each row out: fewer allocations, fewer collections on this thread.
          insert.run(
            values[start] as LedgerValue,
            values[start + 1] as LedgerValue,
            values[start + 2] as LedgerValue,
            values[start + 3] as LedgerValue,
            values[start + 4] as LedgerValue,
            values[start + 5] as LedgerValue,
            values[start + 6] as LedgerValue,
            values[start + 7] as LedgerValue,
            values[start + 8] as LedgerValue,
            values[start + 9] as LedgerValue,
            values[start + 10] as LedgerValue,
            values[start + 11] as LedgerValue,
            values[start + 12] as LedgerValue,
            values[start + 13] as LedgerValue,
          );
          fold.add(values[start + 1] as string, (values[start + 4] as number) + (values[start + 5] as number), values[start + 12] as number);
        }
      }
      for (const entry of fold.minuteTotals()) addMinute.run(entry.organizationId, entry.minute, entry.tokens, entry.lastTime);
      for (const entry of fold.monthTotals()) addMonth.run(entry.organizationId, entry.month, entry.tokens);
    });
  }

  /** Commits batches of encoded rows in one transaction; throws (and commits nothing) if any write fails. */
  commit(batches: LedgerValue[][]): void {
    this.write(batches);
  }

  /** Records when keys were last used: [key id, time] pairs, in one transaction. */
  touchKeys(entries: [string, number][]): void {
    this.touch(entries);
  }
}

// Ledger rows reach the database in two steps. An answer waits only for the first: its row appended to
// usage_ledger_inbox, a table with no index, which a commit of one row writes as one or two pages. The second step
// moves staged rows into usage_ledger, whose five indexes and the usage aggregates cost about nine pages for a
// one-row commit, and far fewer per row when rows are moved a hundred at a time. It runs off the request path
// (the writer thread, ledger-worker.ts), milliseconds later; and whenever the database is opened, so that rows a
// crash left staged count before anything reads usage.
import type { Database } from "bun:sqlite";
import { addToAggregates, UsageFold } from "./usage-fold";

/** usage_ledger's columns in the inbox's order. */
export const stagedColumns = `request_id, organization_id, key_id, model, prompt_tokens, completion_tokens, reasoning_tokens, outcome,
  error_code, rule_id, usage_source, started_at, ended_at, first_token_ms`;

/** Appends one staged row: the 14 fields in the order of `encodeRow`. */
export const stageRowSql = `INSERT INTO usage_ledger_inbox (${stagedColumns}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`;

/** What the move adds to the aggregates for each row it adds to usage_ledger. */
interface AddedUsage {
  organizationId: string;
  keyId: string;
  model: string;
  tokens: number;
  endedAt: number;
}

/**
 * Moves every staged row into usage_ledger and adds its tokens to the usage aggregates, in one transaction (rows
 * staged meanwhile wait for the next move). Returns how many rows it added to usage_ledger.
 */
export function moveStagedRows(sqlite: Database): number {
  return sqlite
    .transaction(() => {
      // A request id is unique by construction (a UUIDv7); OR IGNORE keeps a replayed row from stopping every move.
      // RETURNING gives only the rows the INSERT adds: a row replayed, or staged twice, is in the ledger once and in
      // the aggregates once. (One statement where a SELECT that looked each row up first came before: 2-3 % less
      // of the writer's CPU a row moved, bench/README.md.)
      const added = sqlite
        .query<AddedUsage, []>(
          `INSERT OR IGNORE INTO usage_ledger (${stagedColumns}) SELECT ${stagedColumns} FROM usage_ledger_inbox ORDER BY rowid
           RETURNING organization_id AS organizationId, key_id AS keyId, model, prompt_tokens + completion_tokens AS tokens, ended_at AS endedAt`,
        )
        .all();
      // An empty inbox is left alone: clearing even an empty table writes a page.
      if (added.length === 0 && !sqlite.query("SELECT 1 FROM usage_ledger_inbox LIMIT 1").get()) return 0;
      const fold = new UsageFold();
      for (const row of added) {
        fold.add(row.organizationId, row.tokens, row.endedAt);
        fold.addToHours(row.organizationId, row.keyId, row.model, row.tokens, row.endedAt);
      }
      // The aggregates are summed first: a hundred rows of one organization are one upsert per minute, month and
      // key and model of the hour.
      addToAggregates(sqlite, fold);
      // Every staged row: none can be staged inside this (immediate) transaction.
      sqlite.query("DELETE FROM usage_ledger_inbox").run();
      return added.length;
    })
    .immediate();
}

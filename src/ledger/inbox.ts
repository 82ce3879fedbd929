// Ledger rows reach the database in two steps. An answer waits only for the first: its row appended to
// usage_ledger_inbox, a table with no index, which a commit of one row writes as one or two pages. The second step
// moves staged rows into usage_ledger, whose five indexes and the usage aggregates cost about nine pages for a
// one-row commit, and far fewer per row when rows are moved a hundred at a time. It runs off the request path
// (the writer thread, ledger-worker.ts), milliseconds later; and whenever the database is opened, so that rows a
// crash left staged count before anything reads usage.
import type { Database } from "bun:sqlite";
import { bucketMs } from "../usage-periods";
import { addToAggregates, type TokenKinds, UsageFold } from "./usage-fold";

/** usage_ledger's columns in the inbox's order. */
export const stagedColumns = `request_id, organization_id, key_id, model, prompt_tokens, completion_tokens, reasoning_tokens, cached_tokens,
  quota_tokens, outcome, error_code, rule_id, usage_source, started_at, ended_at, first_token_ms`;

/** What a row counts against the token quotas (see LedgerRow.quotaTokens), in SQL. */
export const quotaTokensSql = "coalesce(quota_tokens, prompt_tokens + completion_tokens)";

/** Appends one staged row: the 16 fields in the order of `encodeRow`. */
export const stageRowSql = `INSERT INTO usage_ledger_inbox (${stagedColumns}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`;

/**
 * Every staged row into usage_ledger, oldest first. A request id is unique by construction (a UUIDv7); OR IGNORE
 * keeps a replayed row from stopping every move.
 */
const moveRowsSql = `INSERT OR IGNORE INTO usage_ledger (${stagedColumns}) SELECT ${stagedColumns} FROM usage_ledger_inbox ORDER BY rowid`;

/** What the move adds to the aggregates for each row it adds to usage_ledger (the slow path, see below). */
interface AddedUsage extends TokenKinds {
  organizationId: string;
  /** What it counts against the token quotas. */
  quotaTokens: number;
  keyId: string;
  model: string;
  endedAt: number;
}

/** The staged rows summed by organization, minute, key and model: what the move adds to every aggregate. */
interface StagedGroup extends TokenKinds {
  organizationId: string;
  minute: number;
  keyId: string;
  model: string;
  rows: number;
  /** What its rows count against the token quotas. */
  quotaTokens: number;
  /** The latest ended_at among the group's rows with tokens (the aggregates skip rows of none, as UsageFold does). */
  lastTime: number | null;
}

/** Thrown inside the fast move's transaction, to roll it back, when a staged row was in usage_ledger already. */
class RowAlreadyMoved extends Error {}

/**
 * Moves every staged row into usage_ledger and adds its tokens to the usage aggregates, in one transaction (rows
 * staged meanwhile wait for the next move). Returns how many rows it added to usage_ledger.
 */
export function moveStagedRows(sqlite: Database): number {
  try {
    return sqlite.transaction(() => moveAll(sqlite)).immediate();
  } catch (error) {
    if (!(error instanceof RowAlreadyMoved)) throw error;
    return sqlite.transaction(() => moveAdded(sqlite)).immediate();
  }
}

/**
 * The move when every staged row is new, as nearly always: the aggregates are summed by SQL from the inbox, in one
 * GROUP BY whose result is a few rows a minute, where reading back each added row (`moveAdded`) cost a JavaScript
 * object a row: 2.55 against 3.1 µs a row moved in moves of 2,000 (bench/HISTORY.md). If the INSERT adds fewer rows
 * than were staged (a replay after a crash, a row staged twice), it rolls back and `moveAdded` runs instead.
 */
function moveAll(sqlite: Database): number {
  const groups = sqlite
    .query<StagedGroup, []>(
      `SELECT organization_id AS organizationId, ended_at / ${bucketMs} AS minute, key_id AS keyId, model, count(*) AS rows,
         sum(prompt_tokens) AS promptTokens, sum(completion_tokens) AS completionTokens, sum(cached_tokens) AS cachedTokens,
         sum(${quotaTokensSql}) AS quotaTokens, max(CASE WHEN prompt_tokens + completion_tokens <> 0 THEN ended_at END) AS lastTime
       FROM usage_ledger_inbox GROUP BY 1, 2, 3, 4`,
    )
    .all();
  // An empty inbox is left alone: clearing even an empty table writes a page.
  if (groups.length === 0) return 0;
  let staged = 0;
  for (const group of groups) staged += group.rows;
  const added = sqlite.query(moveRowsSql).run().changes;
  if (added !== staged) throw new RowAlreadyMoved();
  const fold = new UsageFold();
  for (const group of groups) {
    if (group.lastTime === null) continue;
    // The group's minute is its lastTime's, and so are its hour and month.
    fold.add(group.organizationId, group.quotaTokens, group.lastTime);
    fold.addToHistory(group.organizationId, group.keyId, group.model, group, group.quotaTokens, group.lastTime);
  }
  finishMove(sqlite, fold);
  return added;
}

/** The move when some staged rows were in usage_ledger already: each row the INSERT adds, and only those, counts. */
function moveAdded(sqlite: Database): number {
  // RETURNING gives only the rows the INSERT adds: a row replayed, or staged twice, is in the ledger once and in the
  // aggregates once.
  const added = sqlite
    .query<AddedUsage, []>(
      `${moveRowsSql} RETURNING organization_id AS organizationId, key_id AS keyId, model, prompt_tokens AS promptTokens,
        completion_tokens AS completionTokens, cached_tokens AS cachedTokens, ${quotaTokensSql} AS quotaTokens, ended_at AS endedAt`,
    )
    .all();
  const fold = new UsageFold();
  for (const row of added) {
    fold.add(row.organizationId, row.quotaTokens, row.endedAt);
    fold.addToHistory(row.organizationId, row.keyId, row.model, row, row.quotaTokens, row.endedAt);
  }
  finishMove(sqlite, fold);
  return added.length;
}

/**
 * Adds a move's summed rows to the aggregates (a hundred rows of one organization are one upsert per minute, month,
 * and key and model of the hour), then empties the inbox: none can be staged inside the move's (immediate)
 * transaction.
 */
function finishMove(sqlite: Database, fold: UsageFold): void {
  addToAggregates(sqlite, fold);
  sqlite.query("DELETE FROM usage_ledger_inbox").run();
}

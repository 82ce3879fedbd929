import { sql, type SQL } from "drizzle-orm";
import type { BunSQLDatabase } from "drizzle-orm/bun-sql";
import type * as schema from "../db/postgres/schema";
import { SluiceError } from "../errors";
import { withTimeout } from "../storage/with-timeout";
import type { LedgerStore } from "../storage/types";
import type { LedgerRow } from "./ledger";
import { UsageFold, type MinuteTotal, type MonthTotal } from "./usage-fold";

type Database = BunSQLDatabase<typeof schema>;

interface Pending {
  row: LedgerRow;
  resolve: () => void;
  reject: (error: unknown) => void;
}

/** Transactions committing at once: PostgreSQL groups their WAL flushes, so a few in flight raise throughput. */
const maxCommitsInFlight = 4;
/** A commit that takes longer is refused: its rows' answers fail rather than wait on a dead database. */
const commitTimeoutMs = 5000;

/**
 * One statement for a whole batch: the rows and both aggregates in data-modifying CTEs. A single statement is its
 * own transaction, so this is as atomic as BEGIN … COMMIT and costs one round trip instead of five.
 */
function commitStatement(rows: LedgerRow[], minutes: MinuteTotal[], months: MonthTotal[]): SQL {
  const rowValues = rows.map(
    (row) =>
      sql`(${row.requestId}, ${row.organizationId}, ${row.keyId}, ${row.model}, ${row.promptTokens}::bigint, ${row.completionTokens}::bigint, ${row.reasoningTokens}::bigint, ${row.outcome}, ${row.errorCode}, ${row.ruleId}, ${row.usageSource}, ${row.startedAt}::bigint, ${row.endedAt}::bigint, ${row.firstTokenMs}::bigint)`,
  );
  const insertRows = sql`INSERT INTO usage_ledger (request_id, organization_id, key_id, model, prompt_tokens, completion_tokens, reasoning_tokens,
      outcome, error_code, rule_id, usage_source, started_at, ended_at, first_token_ms) VALUES ${sql.join(rowValues, sql`, `)} ON CONFLICT DO NOTHING`;
  const parts: SQL[] = [];
  if (minutes.length > 0) {
    const values = minutes.map((entry) => sql`(${entry.organizationId}, ${entry.minute}::bigint, ${entry.tokens}::bigint, ${entry.lastTime}::bigint)`);
    parts.push(sql`INSERT INTO usage_minutes AS m (organization_id, minute, tokens, last_time) VALUES ${sql.join(values, sql`, `)}
      ON CONFLICT (organization_id, minute) DO UPDATE SET tokens = m.tokens + excluded.tokens, last_time = greatest(m.last_time, excluded.last_time)`);
  }
  if (months.length > 0) {
    const values = months.map((entry) => sql`(${entry.organizationId}, ${entry.month}::bigint, ${entry.tokens}::bigint)`);
    parts.push(sql`INSERT INTO usage_months AS m (organization_id, month, tokens) VALUES ${sql.join(values, sql`, `)}
      ON CONFLICT (organization_id, month) DO UPDATE SET tokens = m.tokens + excluded.tokens`);
  }
  if (parts.length === 0) return insertRows;
  const ctes = parts.map((part, index) => sql`${sql.raw(`aggregate_${index}`)} AS (${part} RETURNING 1)`);
  return sql`WITH ${sql.join(ctes, sql`, `)} ${insertRows}`;
}

/**
 * The ledger on PostgreSQL: a group commit. Rows recorded while a commit runs share the next transaction (up to
 * four run at once); `record` resolves only after its row's transaction committed, so an answer that waits for it
 * is never lost to a crash of this instance.
 */
export class PostgresLedger implements LedgerStore {
  private pending: Pending[] = [];
  private inFlight = 0;
  private scheduled = false;
  private closed = false;
  private readonly idle: (() => void)[] = [];
  private touches = new Map<string, number>();

  constructor(
    private readonly db: Database,
    /** Told whether each commit worked, so that admission stops while the database does not answer. */
    private readonly onCommit: (ok: boolean) => void = () => {},
  ) {}

  record(row: LedgerRow): Promise<void> {
    if (this.closed) return Promise.reject(new Error("the ledger is closed"));
    return new Promise((resolve, reject) => {
      this.pending.push({ row, resolve, reject });
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => this.pump());
      }
    });
  }

  touchKeys(entries: [string, number][]): void {
    for (const [keyId, time] of entries) this.touches.set(keyId, Math.max(time, this.touches.get(keyId) ?? 0));
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(() => this.pump());
    }
  }

  async flush(): Promise<void> {
    this.pump();
    while (this.inFlight > 0 || this.pending.length > 0) {
      await new Promise<void>((resolve) => this.idle.push(resolve));
      this.pump();
    }
  }

  async close(): Promise<void> {
    await this.flush();
    this.closed = true;
  }

  private pump(): void {
    this.scheduled = false;
    if (this.touches.size > 0 && this.inFlight < maxCommitsInFlight) {
      const touches = this.touches;
      this.touches = new Map();
      this.inFlight++;
      void this.writeTouches(touches).finally(() => this.done());
    }
    while (this.pending.length > 0 && this.inFlight < maxCommitsInFlight) {
      const batch = this.pending;
      this.pending = [];
      this.inFlight++;
      void this.commit(batch).finally(() => this.done());
    }
  }

  private done(): void {
    this.inFlight--;
    if (this.pending.length > 0) this.pump();
    if (this.inFlight === 0 && this.pending.length === 0) for (const resolve of this.idle.splice(0)) resolve();
  }

  private async commit(batch: Pending[]): Promise<void> {
    const rows = batch.map((pending) => pending.row);
    const fold = new UsageFold();
    for (const row of rows) fold.add(row.organizationId, row.promptTokens + row.completionTokens, row.endedAt);
    try {
      await withTimeout(this.db.execute(commitStatement(rows, fold.minuteTotals(), fold.monthTotals())), commitTimeoutMs, "PostgreSQL (ledger commit)");
      this.onCommit(true);
      for (const pending of batch) pending.resolve();
    } catch (error) {
      this.onCommit(false);
      // The caller's answer is withheld (it could not be recorded): a 503 to retry, not an upstream fault.
      const refused = new SluiceError(
        "server_overloaded",
        "The gateway could not record this request (its database does not answer), so it withholds the answer. Retry shortly.",
        {
          retryAfterSeconds: 2,
          cause: error,
        },
      );
      for (const pending of batch) pending.reject(refused);
    }
  }

  private async writeTouches(touches: Map<string, number>): Promise<void> {
    try {
      const values = [...touches].map(([keyId, time]) => sql`(${keyId}, ${time}::bigint)`);
      await withTimeout(
        this.db.execute(sql`UPDATE api_keys AS k SET last_used_at = greatest(coalesce(k.last_used_at, 0), t.time)
          FROM (VALUES ${sql.join(values, sql`, `)}) AS t(id, time) WHERE k.id = t.id`),
        commitTimeoutMs,
        "PostgreSQL (last used)",
      );
    } catch {
      // last_used_at is informational; the next second's update carries a newer time anyway
    }
  }
}

import type { Database } from "bun:sqlite";
import { monthOf } from "../modules/admission/month";
import { bucketMs } from "../modules/admission/window";

export interface LedgerRow {
  requestId: string;
  organizationId: string;
  keyId: string;
  model: string;
  promptTokens: number;
  completionTokens: number;
  reasoningTokens: number;
  outcome: "completed" | "client_disconnected" | "upstream_error" | "content_filter" | "shutdown";
  errorCode: string | null;
  ruleId: string | null;
  usageSource: "upstream" | "tokenizer";
  startedAt: number;
  endedAt: number;
}

interface Pending {
  row: LedgerRow;
  resolve: () => void;
  reject: (error: unknown) => void;
}

/**
 * A commit writes every page it touched to the WAL, so it costs far more than a row (measured here: 40 µs for a
 * one-row commit, 6 µs a row in commits of 32). When traffic is light, a row is committed on the next turn of the
 * event loop, adding no wait; once commits carry several rows (the server is busy), they are spaced this far
 * apart so that the rows finishing in between share one transaction.
 */
const busyCommitIntervalMs = 2;
const busyBatchSize = 4;

/**
 * The usage ledger's writer: a group commit. `record` resolves only once its row is committed, so a caller that
 * waits for it before finishing an answer never answers a request the ledger could lose.
 */
export class Ledger {
  private pending: Pending[] = [];
  private scheduled = false;
  private lastCommit = 0;
  private lastBatchSize = 0;
  private readonly insert;
  private readonly insertBatch;

  constructor(private readonly sqlite: Database) {
    this.insert = sqlite.query<unknown, [string, string, string, string, number, number, number, string, string | null, string | null, string, number, number]>(
      `INSERT OR IGNORE INTO usage_ledger (request_id, organization_id, key_id, model, prompt_tokens, completion_tokens,
         reasoning_tokens, outcome, error_code, rule_id, usage_source, started_at, ended_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    );
    const addMinute = sqlite.query<unknown, [string, number, number, number]>(
      `INSERT INTO usage_minutes (organization_id, minute, tokens, last_time) VALUES (?, ?, ?, ?)
       ON CONFLICT (organization_id, minute) DO UPDATE SET tokens = tokens + excluded.tokens, last_time = max(last_time, excluded.last_time)`,
    );
    const addMonth = sqlite.query<unknown, [string, number, number]>(
      `INSERT INTO usage_months (organization_id, month, tokens) VALUES (?, ?, ?)
       ON CONFLICT (organization_id, month) DO UPDATE SET tokens = tokens + excluded.tokens`,
    );
    this.insertBatch = sqlite.transaction((rows: Pending[]) => {
      // The aggregates are summed here first: a busy batch of one organization is one upsert, not one per row.
      const minutes = new Map<string, { organizationId: string; minute: number; tokens: number; lastTime: number }>();
      const months = new Map<string, { organizationId: string; month: number; tokens: number }>();
      for (const { row } of rows) {
        this.insert.run(
          row.requestId, row.organizationId, row.keyId, row.model, row.promptTokens, row.completionTokens,
          row.reasoningTokens, row.outcome, row.errorCode, row.ruleId, row.usageSource, row.startedAt, row.endedAt,
        );
        const tokens = row.promptTokens + row.completionTokens;
        if (tokens === 0) continue;
        const minute = Math.floor(row.endedAt / bucketMs);
        const minuteEntry = minutes.get(`${row.organizationId} ${minute}`);
        if (minuteEntry) {
          minuteEntry.tokens += tokens;
          minuteEntry.lastTime = Math.max(minuteEntry.lastTime, row.endedAt);
        } else minutes.set(`${row.organizationId} ${minute}`, { organizationId: row.organizationId, minute, tokens, lastTime: row.endedAt });
        const month = monthOf(row.endedAt);
        const monthEntry = months.get(`${row.organizationId} ${month}`);
        if (monthEntry) monthEntry.tokens += tokens;
        else months.set(`${row.organizationId} ${month}`, { organizationId: row.organizationId, month, tokens });
      }
      for (const entry of minutes.values()) addMinute.run(entry.organizationId, entry.minute, entry.tokens, entry.lastTime);
      for (const entry of months.values()) addMonth.run(entry.organizationId, entry.month, entry.tokens);
    });
  }

  /** Queues a row for the next group commit; resolves when it is committed. */
  record(row: LedgerRow): Promise<void> {
    return new Promise((resolve, reject) => {
      this.pending.push({ row, resolve, reject });
      if (this.scheduled) return;
      this.scheduled = true;
      const wait = this.lastBatchSize < busyBatchSize ? 0 : this.lastCommit + busyCommitIntervalMs - performance.now();
      if (wait <= 0) setImmediate(() => this.flush());
      else setTimeout(() => this.flush(), wait);
    });
  }

  /** Commits everything queued now (also called at shutdown). */
  flush(): void {
    this.scheduled = false;
    const batch = this.pending;
    if (batch.length === 0) return;
    this.pending = [];
    this.lastCommit = performance.now();
    this.lastBatchSize = batch.length;
    try {
      this.insertBatch(batch);
      for (const entry of batch) entry.resolve();
    } catch (error) {
      for (const entry of batch) entry.reject(error);
    }
  }
}

import type { SQL } from "bun";
import { withTimeout } from "../storage/with-timeout";
import type { LedgerRefusalListener, LedgerStore } from "../storage/types";
import { bucketMs, hourMs } from "../usage-periods";
import type { LedgerRow } from "./ledger";
import { RowNotRecorded } from "./not-recorded";

interface Pending {
  row: LedgerRow;
  resolve: () => void;
  reject: (error: unknown) => void;
}

/** A commit that takes longer is refused: its rows' answers fail rather than wait on a dead database. */
const commitTimeoutMs = 5000;
/**
 * Rows in one commit at most (about 15 ms of PostgreSQL's time). A backlog (the database slow for a while) goes in
 * commits of this size one after the other, so none holds the aggregates' row locks for long, or nears the timeout.
 */
export const maxRowsPerCommit = 1000;

/**
 * Commits a batch of rows and adds their tokens to the aggregates (minutes, months, hours by key and model), in one
 * statement: a single statement is its own transaction, as atomic as BEGIN … COMMIT at one round trip instead of
 * five. The rows travel as one JSON parameter: JSON.stringify is native, where an array parameter a column costs the
 * client's JavaScript quoting of every element (bound as text, because a string bound as json would be encoded again).
 * The statement's text is the same for every batch: the client prepares it once. A commit costs PostgreSQL about
 * 170 µs, and each row about 15 more (bench/HISTORY.md, forty-fifth session). Each row's minute and calendar month (UTC,
 * as monthOf() counts them) are worked out from the rows the insert returns: the aggregates count only the rows this
 * statement inserted, so a row recorded twice counts once there as in the ledger. They are upserted in key order, so
 * that concurrent commits cannot deadlock.
 */
function commitRows(client: SQL, rows: LedgerRow[]): Promise<unknown> {
  return client`WITH inserted AS (
      INSERT INTO usage_ledger (request_id, organization_id, key_id, model, prompt_tokens, completion_tokens, reasoning_tokens, cached_tokens,
        quota_tokens, outcome, error_code, rule_id, usage_source, started_at, ended_at, first_token_ms)
      SELECT r."requestId", r."organizationId", r."keyId", r.model, r."promptTokens", r."completionTokens", r."reasoningTokens", r."cachedTokens",
        r."quotaTokens", r.outcome, r."errorCode", r."ruleId", r."usageSource", r."startedAt", r."endedAt", r."firstTokenMs"
      FROM json_to_recordset(${JSON.stringify(rows)}::text::json) AS r("requestId" text, "organizationId" text, "keyId" text, model text,
        "promptTokens" bigint, "completionTokens" bigint, "reasoningTokens" bigint, "cachedTokens" bigint, "quotaTokens" bigint, outcome text,
        "errorCode" text, "ruleId" text, "usageSource" text, "startedAt" bigint, "endedAt" bigint, "firstTokenMs" bigint)
      ON CONFLICT DO NOTHING RETURNING organization_id, key_id, model, prompt_tokens, completion_tokens, cached_tokens,
        prompt_tokens + completion_tokens AS tokens, coalesce(quota_tokens, prompt_tokens + completion_tokens) AS quota, ended_at
    ), counted AS (
      SELECT organization_id, key_id, model, tokens, quota, prompt_tokens, completion_tokens, cached_tokens, ended_at,
        ended_at / ${bucketMs}::bigint AS minute,
        (extract(year FROM utc) * 12 + extract(month FROM utc) - 1)::bigint AS month
      FROM inserted, LATERAL (SELECT to_timestamp(ended_at / 1000) AT TIME ZONE 'UTC' AS utc) AS ended WHERE tokens > 0
    ), minutes AS (
      INSERT INTO usage_minutes AS m (organization_id, minute, tokens, last_time)
      SELECT organization_id, minute, sum(quota), max(ended_at) FROM counted GROUP BY organization_id, minute ORDER BY organization_id COLLATE "C", minute
      ON CONFLICT (organization_id, minute) DO UPDATE SET tokens = m.tokens + excluded.tokens, last_time = greatest(m.last_time, excluded.last_time)
    ), months AS (
      INSERT INTO usage_months AS m (organization_id, month, tokens)
      SELECT organization_id, month, sum(quota) FROM counted GROUP BY organization_id, month ORDER BY organization_id COLLATE "C", month
      ON CONFLICT (organization_id, month) DO UPDATE SET tokens = m.tokens + excluded.tokens
    ), hours AS (
      INSERT INTO usage_hours AS h (organization_id, hour, key_id, model, tokens, prompt_tokens, completion_tokens, cached_tokens, quota_tokens)
      SELECT organization_id, ended_at / ${hourMs}::bigint, key_id, model, sum(tokens), sum(prompt_tokens), sum(completion_tokens),
        sum(cached_tokens), sum(quota) FROM counted GROUP BY 1, 2, 3, 4
      ORDER BY organization_id COLLATE "C", 2, key_id COLLATE "C", model COLLATE "C"
      ON CONFLICT (organization_id, hour, key_id, model) DO UPDATE SET tokens = h.tokens + excluded.tokens,
        prompt_tokens = h.prompt_tokens + excluded.prompt_tokens, completion_tokens = h.completion_tokens + excluded.completion_tokens,
        cached_tokens = h.cached_tokens + excluded.cached_tokens, quota_tokens = h.quota_tokens + excluded.quota_tokens
    ), key_months AS (
      INSERT INTO usage_key_months AS k (organization_id, month, key_id, model, tokens, prompt_tokens, completion_tokens, cached_tokens)
      SELECT organization_id, month, key_id, model, sum(tokens), sum(prompt_tokens), sum(completion_tokens), sum(cached_tokens)
      FROM counted GROUP BY 1, 2, 3, 4
      ORDER BY organization_id COLLATE "C", 2, key_id COLLATE "C", model COLLATE "C"
      ON CONFLICT (organization_id, month, key_id, model) DO UPDATE SET tokens = k.tokens + excluded.tokens,
        prompt_tokens = k.prompt_tokens + excluded.prompt_tokens, completion_tokens = k.completion_tokens + excluded.completion_tokens,
        cached_tokens = k.cached_tokens + excluded.cached_tokens
    )
    SELECT count(*) AS inserted FROM inserted`;
}

/**
 * The ledger on PostgreSQL: a group commit. One commit runs at a time, and the rows recorded while it runs share the
 * next: every batch upserts the same aggregate rows (its organizations' minute, month and hour), so a second commit in
 * flight would only wait for the first's row locks, and each commit costs PostgreSQL about 170 µs however few rows it
 * holds (bench/HISTORY.md, forty-fifth session). `record` resolves only after its row's transaction committed, so an
 * answer that waits for it is never lost to a crash of this instance.
 */
export class PostgresLedger implements LedgerStore {
  private pending: Pending[] = [];
  private committing = false;
  /** Last-use times go in a statement of their own, beside the commits rather than in their line. */
  private touching = false;
  private scheduled = false;
  private closed = false;
  private readonly idle: (() => void)[] = [];
  private touches = new Map<string, number>();

  constructor(
    private readonly client: SQL,
    /** Told whether each commit worked, so that admission stops while the database does not answer. */
    private readonly onCommit: (ok: boolean) => void = () => {},
    /** Told of every commit that failed: the error, and the rows it refused. */
    private readonly onRefused: LedgerRefusalListener = () => {},
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
    while (this.committing || this.touching || this.pending.length > 0) await new Promise<void>((resolve) => this.idle.push(resolve));
  }

  async close(): Promise<void> {
    await this.flush();
    this.closed = true;
  }

  /** Starts what can start (the next commit, the last-use update); wakes `flush` when nothing is left to write. */
  private pump(): void {
    this.scheduled = false;
    if (this.touches.size > 0 && !this.touching) {
      const touches = this.touches;
      this.touches = new Map();
      this.touching = true;
      void this.writeTouches(touches).finally(() => {
        this.touching = false;
        this.pump();
      });
    }
    if (this.pending.length > 0 && !this.committing) {
      let batch = this.pending;
      if (batch.length > maxRowsPerCommit) batch = this.pending.splice(0, maxRowsPerCommit);
      else this.pending = [];
      this.committing = true;
      void this.commit(batch).finally(() => {
        this.committing = false;
        this.pump();
      });
    }
    if (!this.committing && !this.touching && this.pending.length === 0) for (const resolve of this.idle.splice(0)) resolve();
  }

  private async commit(batch: Pending[]): Promise<void> {
    try {
      await withTimeout(
        commitRows(
          this.client,
          batch.map((pending) => pending.row),
        ),
        commitTimeoutMs,
        "PostgreSQL (ledger commit)",
      );
      this.onCommit(true);
      for (const pending of batch) pending.resolve();
    } catch (error) {
      this.onCommit(false);
      this.onRefused(error, batch.length);
      const refused = new RowNotRecorded("its database does not answer", error);
      for (const pending of batch) pending.reject(refused);
    }
  }

  private async writeTouches(touches: Map<string, number>): Promise<void> {
    try {
      // Arrays, as in the commit: one statement text for any number of keys.
      await withTimeout(
        this.client`UPDATE api_keys AS k SET last_used_at = greatest(coalesce(k.last_used_at, 0), t.time)
          FROM unnest(${[...touches.keys()]}::text[], ${[...touches.values()]}::bigint[]) AS t(id, time) WHERE k.id = t.id`,
        commitTimeoutMs,
        "PostgreSQL (last used)",
      );
    } catch {
      // last_used_at is informational; the next second's update carries a newer time anyway
    }
  }
}

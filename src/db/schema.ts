import { sql } from "drizzle-orm";
import { index, integer, primaryKey, sqliteTable, text } from "drizzle-orm/sqlite-core";

/** Times are integer milliseconds since the epoch (UTC). */
export const organizations = sqliteTable("organizations", {
  id: text("id").primaryKey(),
  name: text("name").notNull().unique(),
  plan: text("plan").notNull(),
  status: text("status", { enum: ["active", "waitlist", "suspended"] }).notNull(),
  createdAt: integer("created_at").notNull(),
  /** The networks its keys may be used from unless a key names its own, a JSON array as a key's; null: anywhere. */
  networks: text("networks"),
});

export const apiKeys = sqliteTable(
  "api_keys",
  {
    id: text("id").primaryKey(),
    organizationId: text("organization_id")
      .notNull()
      .references(() => organizations.id),
    name: text("name").notNull(),
    /** The first characters of the key, shown so people can tell their keys apart. */
    prefix: text("prefix").notNull(),
    /** SHA-256 of the whole key, hex. The key itself is never stored. */
    hash: text("hash").notNull().unique(),
    createdAt: integer("created_at").notNull(),
    lastUsedAt: integer("last_used_at"),
    expiresAt: integer("expires_at"),
    revokedAt: integer("revoked_at"),
    /** The key's own caps inside its organization's plan; null: none. */
    maxConcurrency: integer("max_concurrency"),
    tokensPer5h: integer("tokens_per_5h"),
    tokensPerMonth: integer("tokens_per_month"),
    requestsPerMinute: integer("requests_per_minute"),
    /** The models the key may call, a JSON array of model ids within its plan's; null: every model of the plan. */
    models: text("models"),
    /** The networks the key may be used from, a JSON array of addresses and CIDR ranges; null: anywhere. */
    networks: text("networks"),
  },
  (table) => [
    index("api_keys_organization_idx").on(table.organizationId),
    // Start-up reads the few keys with caps; this index holds only them, so a million keys without caps cost nothing.
    index("api_keys_limited_idx")
      .on(table.id)
      .where(sql`max_concurrency IS NOT NULL OR tokens_per_5h IS NOT NULL OR tokens_per_month IS NOT NULL OR requests_per_minute IS NOT NULL`),
  ],
);

/** A ledger row's columns, the same in usage_ledger and in usage_ledger_inbox (fresh builders for each table). */
function ledgerRowColumns() {
  return {
    /** The same text as the response's `x-request-id` header. */
    requestId: text("request_id").notNull(),
    organizationId: text("organization_id").notNull(),
    keyId: text("key_id").notNull(),
    model: text("model").notNull(),
    promptTokens: integer("prompt_tokens").notNull(),
    completionTokens: integer("completion_tokens").notNull(),
    reasoningTokens: integer("reasoning_tokens").notNull(),
    /** Prompt tokens the upstream read from its prompt cache (part of prompt_tokens). */
    cachedTokens: integer("cached_tokens").notNull().default(0),
    /** What the row counts against the token quotas, when its model's quota_weight is not 1; null: prompt + completion. */
    quotaTokens: integer("quota_tokens"),
    /** completed | client_disconnected | upstream_error | content_filter | shutdown */
    outcome: text("outcome").notNull(),
    errorCode: text("error_code"),
    /** The red-line rule behind a `content_filter` outcome. */
    ruleId: text("rule_id"),
    /** Whether the tokens came from the upstream's usage or from Sluice's own count. */
    usageSource: text("usage_source").notNull(),
    startedAt: integer("started_at").notNull(),
    endedAt: integer("ended_at").notNull(),
    /** Milliseconds from the start to the first token the model sent; null when none came. */
    firstTokenMs: integer("first_token_ms"),
  };
}

/** One row per request that reached an upstream (or the demo backend). */
export const usageLedger = sqliteTable(
  "usage_ledger",
  { ...ledgerRowColumns(), requestId: text("request_id").primaryKey() },
  // Each index serves the request log (newest first by ended_at, one filter per index) and costs one more B-tree
  // write per row; rows arrive in ended_at order, so each write lands on the index's last page for its key, model or
  // organization. Outcomes other than `completed` are rare: their index is partial and costs a completed row nothing.
  (table) => [
    index("usage_ledger_organization_time_idx").on(table.organizationId, table.endedAt),
    index("usage_ledger_time_idx").on(table.endedAt),
    index("usage_ledger_key_time_idx").on(table.keyId, table.endedAt),
    index("usage_ledger_model_time_idx").on(table.model, table.endedAt),
    index("usage_ledger_outcome_time_idx").on(table.outcome, table.endedAt).where(sql`outcome <> 'completed'`),
  ],
);

/**
 * Ledger rows committed but not yet moved into usage_ledger (see src/ledger/inbox.ts). A row is committed
 * here before its answer's last byte: one page at the end of a table with no index, against the nine pages of
 * usage_ledger's indexes and the usage aggregates. The writer thread moves them, in batches, within milliseconds;
 * opening the database moves whatever a crash left.
 */
export const usageLedgerInbox = sqliteTable("usage_ledger_inbox", ledgerRowColumns());

/** Every administrative change and sign-in, whoever made it and however (console or CLI). Never a secret. */
export const auditLog = sqliteTable(
  "audit_log",
  {
    /** `aud_` and a UUIDv7: ordered by time. */
    id: text("id").primaryKey(),
    at: integer("at").notNull(),
    /** console | cli */
    actorKind: text("actor_kind").notNull(),
    /** The console account's email, or the operating-system user who ran the CLI. */
    actor: text("actor").notNull(),
    /** organization.created, key.revoked, signin.failed, ... (see src/modules/audit/service.ts) */
    action: text("action").notNull(),
    /** What was changed: an organization's name, a key's id, an account's email. */
    target: text("target").notNull(),
    organizationId: text("organization_id"),
    /** JSON: { field: [old, new] }, old null for what was created. */
    changes: text("changes"),
    /** The address a console change or sign-in came from (see ClientAddresses); null for the CLI and the server. */
    address: text("address"),
  },
  (table) => [index("audit_log_at_idx").on(table.at)],
);

/** When an operator last reset an organization's usage: ledger rows that ended before it no longer count. */
export const usageResets = sqliteTable("usage_resets", {
  organizationId: text("organization_id").primaryKey(),
  resetAt: integer("reset_at").notNull(),
});

/**
 * The ledger summed per organization and minute, written in the same transaction as the ledger rows. Admission is
 * rebuilt from these at start, so start-up does not grow with the ledger's history.
 */
export const usageMinutes = sqliteTable(
  "usage_minutes",
  {
    organizationId: text("organization_id").notNull(),
    /** Minutes since the epoch of the rows' `ended_at`. */
    minute: integer("minute").notNull(),
    tokens: integer("tokens").notNull(),
    /** The latest `ended_at` in this minute: the whole minute leaves the 5-hour window 5 hours after it. */
    lastTime: integer("last_time").notNull(),
  },
  (table) => [primaryKey({ columns: [table.organizationId, table.minute] }), index("usage_minutes_minute_idx").on(table.minute)],
);

/** The ledger summed per organization and calendar month (UTC), written with the ledger rows. */
export const usageMonths = sqliteTable(
  "usage_months",
  {
    organizationId: text("organization_id").notNull(),
    /** year × 12 + month index (0-based), as monthOf() computes it. */
    month: integer("month").notNull(),
    tokens: integer("tokens").notNull(),
  },
  (table) => [primaryKey({ columns: [table.organizationId, table.month] })],
);

/** The tokens of a history aggregate (usage_hours, usage_key_months), by kind (fresh builders for each table). */
function historyTokenColumns() {
  return {
    /** prompt_tokens + completion_tokens. */
    tokens: integer("tokens").notNull(),
    promptTokens: integer("prompt_tokens").notNull().default(0),
    completionTokens: integer("completion_tokens").notNull().default(0),
    /** Of the prompt tokens, those read from the upstream's prompt cache. */
    cachedTokens: integer("cached_tokens").notNull().default(0),
  };
}

/**
 * The ledger summed per organization, hour, key and model, written with the ledger rows and never reset: the
 * console's 24-hour chart and a capped key's month read it, so neither grows with the rows an hour holds.
 */
export const usageHours = sqliteTable(
  "usage_hours",
  {
    organizationId: text("organization_id").notNull(),
    /** Hours since the epoch of the rows' `ended_at`. */
    hour: integer("hour").notNull(),
    keyId: text("key_id").notNull(),
    model: text("model").notNull(),
    ...historyTokenColumns(),
    /** What these tokens count against the token quotas (a model's quota_weight applied row by row): a key's month reads it. */
    quotaTokens: integer("quota_tokens").notNull().default(0),
  },
  (table) => [
    primaryKey({ columns: [table.organizationId, table.hour, table.keyId, table.model] }),
    index("usage_hours_key_hour_idx").on(table.keyId, table.hour),
  ],
);

/**
 * Tokens per organization, UTC month (as monthOf() numbers it), key and model: what a month's usage report reads, a
 * row per key and model where usage_hours has one per hour. Written with the ledger's rows (usage-fold.ts) and never
 * reset, as usage_hours.
 */
export const usageKeyMonths = sqliteTable(
  "usage_key_months",
  {
    organizationId: text("organization_id").notNull(),
    month: integer("month").notNull(),
    keyId: text("key_id").notNull(),
    model: text("model").notNull(),
    ...historyTokenColumns(),
  },
  (table) => [primaryKey({ columns: [table.organizationId, table.month, table.keyId, table.model] })],
);

/** People who sign in to the console: members of one organization, or operators of the whole installation. */
export const users = sqliteTable("users", {
  id: text("id").primaryKey(),
  email: text("email").notNull().unique(),
  /** Bun.password (argon2id). */
  passwordHash: text("password_hash").notNull(),
  role: text("role", { enum: ["member", "operator"] }).notNull(),
  /** Null for operators. */
  organizationId: text("organization_id").references(() => organizations.id),
  createdAt: integer("created_at").notNull(),
});

/** Console sessions; the cookie holds the token, the database only its SHA-256. */
export const sessions = sqliteTable(
  "sessions",
  {
    tokenHash: text("token_hash").primaryKey(),
    userId: text("user_id")
      .notNull()
      .references(() => users.id),
    /** Sent back by the pages in `x-csrf-token` with every change. */
    csrfToken: text("csrf_token").notNull(),
    createdAt: integer("created_at").notNull(),
    expiresAt: integer("expires_at").notNull(),
  },
  (table) => [index("sessions_user_idx").on(table.userId)],
);

/**
 * Console access tokens: what scripts and provisioning systems use instead of a session (`Authorization: Bearer` on
 * the console API), each acting as the account it belongs to. Stored as their SHA-256 only, as keys are.
 */
export const consoleTokens = sqliteTable(
  "console_tokens",
  {
    id: text("id").primaryKey(),
    userId: text("user_id")
      .notNull()
      .references(() => users.id),
    name: text("name").notNull(),
    tokenHash: text("token_hash").notNull().unique(),
    /** The first characters, to tell tokens apart in lists. */
    prefix: text("prefix").notNull(),
    createdAt: integer("created_at").notNull(),
    expiresAt: integer("expires_at"),
    revokedAt: integer("revoked_at"),
    /** When it was last used, to the minute (written at most once a minute per instance: see ConsoleTokens). */
    lastUsedAt: integer("last_used_at"),
  },
  (table) => [index("console_tokens_user_idx").on(table.userId)],
);

/**
 * One row whose `version` triggers (migration 0006) raise on every change that a running server caches: keys,
 * organizations (status, plan) and usage resets. The ledger's writer thread commits constantly, so SQLite's
 * `data_version` cannot tell the server that someone else (the CLI, the console of another process) changed what
 * it caches; this row can, and the server reads it once per turn of its event loop (see AuthService).
 */
export const changeCounter = sqliteTable("change_counter", {
  id: integer("id").primaryKey(),
  version: integer("version").notNull(),
});

// The PostgreSQL twin of ../schema.ts (SQLite): the same tables, columns and indexes, so that both backends answer
// the same queries. Times are milliseconds since the epoch in bigint columns, read back as JavaScript numbers.
import { sql } from "drizzle-orm";
import { bigint, index, pgTable, primaryKey, text } from "drizzle-orm/pg-core";

const time = (name: string) => bigint(name, { mode: "number" });

export const organizations = pgTable("organizations", {
  id: text("id").primaryKey(),
  name: text("name").notNull().unique(),
  plan: text("plan").notNull(),
  status: text("status", { enum: ["active", "waitlist", "suspended"] }).notNull(),
  createdAt: time("created_at").notNull(),
  networks: text("networks"),
});

export const apiKeys = pgTable(
  "api_keys",
  {
    id: text("id").primaryKey(),
    organizationId: text("organization_id")
      .notNull()
      .references(() => organizations.id),
    name: text("name").notNull(),
    prefix: text("prefix").notNull(),
    hash: text("hash").notNull().unique(),
    createdAt: time("created_at").notNull(),
    lastUsedAt: time("last_used_at"),
    expiresAt: time("expires_at"),
    revokedAt: time("revoked_at"),
    maxConcurrency: bigint("max_concurrency", { mode: "number" }),
    tokensPer5h: bigint("tokens_per_5h", { mode: "number" }),
    tokensPerMonth: bigint("tokens_per_month", { mode: "number" }),
    requestsPerMinute: bigint("requests_per_minute", { mode: "number" }),
    /** The models the key may call, a JSON array of model ids within its plan's; null: every model of the plan. */
    models: text("models"),
    /** The networks the key may be used from, a JSON array of addresses and CIDR ranges; null: anywhere. */
    networks: text("networks"),
  },
  (table) => [
    index("api_keys_organization_idx").on(table.organizationId),
    index("api_keys_limited_idx")
      .on(table.id)
      .where(sql`max_concurrency IS NOT NULL OR tokens_per_5h IS NOT NULL OR tokens_per_month IS NOT NULL OR requests_per_minute IS NOT NULL`),
  ],
);

export const usageLedger = pgTable(
  "usage_ledger",
  {
    requestId: text("request_id").primaryKey(),
    organizationId: text("organization_id").notNull(),
    keyId: text("key_id").notNull(),
    model: text("model").notNull(),
    promptTokens: bigint("prompt_tokens", { mode: "number" }).notNull(),
    completionTokens: bigint("completion_tokens", { mode: "number" }).notNull(),
    reasoningTokens: bigint("reasoning_tokens", { mode: "number" }).notNull(),
    /** Prompt tokens the upstream read from its prompt cache (part of prompt_tokens). */
    cachedTokens: bigint("cached_tokens", { mode: "number" }).notNull().default(0),
    /** What the row counts against the token quotas, when its model's quota_weight is not 1; null: prompt + completion. */
    quotaTokens: bigint("quota_tokens", { mode: "number" }),
    outcome: text("outcome").notNull(),
    errorCode: text("error_code"),
    ruleId: text("rule_id"),
    usageSource: text("usage_source").notNull(),
    startedAt: time("started_at").notNull(),
    endedAt: time("ended_at").notNull(),
    firstTokenMs: bigint("first_token_ms", { mode: "number" }),
  },
  (table) => [
    index("usage_ledger_organization_time_idx").on(table.organizationId, table.endedAt),
    index("usage_ledger_time_idx").on(table.endedAt),
    index("usage_ledger_key_time_idx").on(table.keyId, table.endedAt),
    index("usage_ledger_model_time_idx").on(table.model, table.endedAt),
    index("usage_ledger_outcome_time_idx").on(table.outcome, table.endedAt).where(sql`outcome <> 'completed'`),
  ],
);

export const auditLog = pgTable(
  "audit_log",
  {
    id: text("id").primaryKey(),
    at: time("at").notNull(),
    actorKind: text("actor_kind").notNull(),
    actor: text("actor").notNull(),
    action: text("action").notNull(),
    target: text("target").notNull(),
    organizationId: text("organization_id"),
    changes: text("changes"),
    address: text("address"),
  },
  (table) => [index("audit_log_at_idx").on(table.at)],
);

export const usageResets = pgTable("usage_resets", {
  organizationId: text("organization_id").primaryKey(),
  resetAt: time("reset_at").notNull(),
});

export const usageMinutes = pgTable(
  "usage_minutes",
  {
    organizationId: text("organization_id").notNull(),
    minute: bigint("minute", { mode: "number" }).notNull(),
    tokens: bigint("tokens", { mode: "number" }).notNull(),
    lastTime: time("last_time").notNull(),
  },
  (table) => [primaryKey({ columns: [table.organizationId, table.minute] }), index("usage_minutes_minute_idx").on(table.minute)],
);

export const usageMonths = pgTable(
  "usage_months",
  {
    organizationId: text("organization_id").notNull(),
    month: bigint("month", { mode: "number" }).notNull(),
    tokens: bigint("tokens", { mode: "number" }).notNull(),
  },
  (table) => [primaryKey({ columns: [table.organizationId, table.month] })],
);

/** The tokens of a history aggregate (usage_hours, usage_key_months), by kind (fresh builders for each table). */
function historyTokenColumns() {
  return {
    /** prompt_tokens + completion_tokens. */
    tokens: bigint("tokens", { mode: "number" }).notNull(),
    promptTokens: bigint("prompt_tokens", { mode: "number" }).notNull().default(0),
    completionTokens: bigint("completion_tokens", { mode: "number" }).notNull().default(0),
    /** Of the prompt tokens, those read from the upstream's prompt cache. */
    cachedTokens: bigint("cached_tokens", { mode: "number" }).notNull().default(0),
  };
}

/** As in ../schema.ts: the ledger summed per organization, hour, key and model, never reset. */
export const usageHours = pgTable(
  "usage_hours",
  {
    organizationId: text("organization_id").notNull(),
    hour: bigint("hour", { mode: "number" }).notNull(),
    keyId: text("key_id").notNull(),
    model: text("model").notNull(),
    ...historyTokenColumns(),
    /** What these tokens count against the token quotas (a model's quota_weight applied row by row): a key's month reads it. */
    quotaTokens: bigint("quota_tokens", { mode: "number" }).notNull().default(0),
  },
  (table) => [
    primaryKey({ columns: [table.organizationId, table.hour, table.keyId, table.model] }),
    index("usage_hours_key_hour_idx").on(table.keyId, table.hour),
  ],
);

export const usageKeyMonths = pgTable(
  "usage_key_months",
  {
    organizationId: text("organization_id").notNull(),
    month: bigint("month", { mode: "number" }).notNull(),
    keyId: text("key_id").notNull(),
    model: text("model").notNull(),
    ...historyTokenColumns(),
  },
  (table) => [primaryKey({ columns: [table.organizationId, table.month, table.keyId, table.model] })],
);

export const users = pgTable("users", {
  id: text("id").primaryKey(),
  email: text("email").notNull().unique(),
  passwordHash: text("password_hash").notNull(),
  role: text("role", { enum: ["member", "operator"] }).notNull(),
  organizationId: text("organization_id").references(() => organizations.id),
  createdAt: time("created_at").notNull(),
});

export const sessions = pgTable(
  "sessions",
  {
    tokenHash: text("token_hash").primaryKey(),
    userId: text("user_id")
      .notNull()
      .references(() => users.id),
    csrfToken: text("csrf_token").notNull(),
    createdAt: time("created_at").notNull(),
    expiresAt: time("expires_at").notNull(),
  },
  (table) => [index("sessions_user_idx").on(table.userId)],
);

export const consoleTokens = pgTable(
  "console_tokens",
  {
    id: text("id").primaryKey(),
    userId: text("user_id")
      .notNull()
      .references(() => users.id),
    name: text("name").notNull(),
    tokenHash: text("token_hash").notNull().unique(),
    prefix: text("prefix").notNull(),
    createdAt: time("created_at").notNull(),
    expiresAt: time("expires_at"),
    revokedAt: time("revoked_at"),
    /** When it was last used, to the minute (written at most once a minute per instance: see ConsoleTokens). */
    lastUsedAt: time("last_used_at"),
  },
  (table) => [index("console_tokens_user_idx").on(table.userId)],
);

/** Failed console sign-ins per email in the current window, shared by every instance. */
export const signInFailures = pgTable("sign_in_failures", {
  email: text("email").primaryKey(),
  count: bigint("count", { mode: "number" }).notNull(),
  since: time("since").notNull(),
});

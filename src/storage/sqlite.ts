// The SQLite backend: one file, one instance (the default). Every call is synchronous underneath; the interfaces are
// async only because PostgreSQL's are.
import { and, asc, desc, eq, getTableColumns, gt, isNull, lt } from "drizzle-orm";
import type { DatabaseHandle } from "../db/client";
import { apiKeys, auditLog, consoleTokens, organizations, sessions, usageLedger, usageLedgerInbox, users } from "../db/schema";
import { Ledger } from "../ledger/ledger";
import { moveStagedRows, quotaTokensSql, stagedColumns } from "../ledger/inbox";
import { addToAggregates, UsageFold } from "../ledger/usage-fold";
import { bucketMs, hourMs, monthOf, startOfMonth } from "../usage-periods";
import { auditConditions, requestLogColumns, requestLogConditions, sqliteCommon } from "./log-conditions";
import { tokenUserSelection, usableToken, usedBefore } from "./token-columns";
import { oldestNeededMinute, usageByOrganization, usageWindowStart } from "./usage-rows";
import type {
  AccountRepository,
  ApiKeyInfo,
  RequestStart,
  AuditEntry,
  AuditRepository,
  ChangeFeed,
  HourlyUsage,
  KeyCredentials,
  KeyRepository,
  LedgerBucket,
  LedgerStore,
  LimitedKey,
  OrganizationRepository,
  RecentRefusal,
  RefusalCount,
  RequestLogFilter,
  RequestLogRepository,
  RequestLogRow,
  Storage,
  UsageRepository,
  UsageReportRow,
} from "./types";
import { keyListColumns, listText, withCredentialLists, withKeyLists, withNetworkList, type KeyListColumns } from "./key-lists";

/** The partial index of keys with caps answers only a query with its own condition. */
const limitedCondition = "max_concurrency IS NOT NULL OR tokens_per_5h IS NOT NULL OR tokens_per_month IS NOT NULL OR requests_per_minute IS NOT NULL";

/** Every column of a key but its hash. */
const { hash: _hash, ...shownKeyColumns } = getTableColumns(apiKeys);

function organizationRepository({ db }: DatabaseHandle): OrganizationRepository {
  return {
    async insert(row) {
      db.insert(organizations)
        .values({ ...row, networks: listText(row.networks ?? null) })
        .run();
    },
    async update(id, changes) {
      db.update(organizations)
        .set({ ...changes, networks: listText(changes.networks) })
        .where(eq(organizations.id, id))
        .run();
    },
    async list() {
      return db.select().from(organizations).orderBy(asc(organizations.createdAt)).all().map(withNetworkList);
    },
    async findById(id) {
      const row = db.select().from(organizations).where(eq(organizations.id, id)).get();
      return row && withNetworkList(row);
    },
    async findByName(name) {
      const row = db.select().from(organizations).where(eq(organizations.name, name)).get();
      return row && withNetworkList(row);
    },
  };
}

function keyRepository({ db, sqlite }: DatabaseHandle): KeyRepository {
  // The lists as stored (see key-lists.ts), read back below.
  const lookup = sqlite.query<
    Omit<KeyCredentials, keyof KeyListColumns | "organizationNetworks"> & KeyListColumns & { organizationNetworks: string | null },
    [string]
  >(
    `SELECT k.hash AS hash, k.id AS keyId, o.id AS organizationId, o.name AS organizationName,
            o.status AS organizationStatus, o.plan AS planId, k.expires_at AS expiresAt, k.revoked_at AS revokedAt,
            k.max_concurrency AS maxConcurrency, k.tokens_per_5h AS tokensPer5h, k.tokens_per_month AS tokensPerMonth,
            k.requests_per_minute AS requestsPerMinute, k.models AS models, k.networks AS networks, o.networks AS organizationNetworks
       FROM api_keys k JOIN organizations o ON o.id = k.organization_id
      WHERE k.hash = ?`,
  );
  return {
    async insert(row) {
      db.insert(apiKeys)
        .values({ ...row, ...keyListColumns(row) })
        .run();
    },
    async listForOrganization(organizationId): Promise<ApiKeyInfo[]> {
      return db.select(shownKeyColumns).from(apiKeys).where(eq(apiKeys.organizationId, organizationId)).orderBy(asc(apiKeys.createdAt)).all().map(withKeyLists);
    },
    async find(keyId) {
      const row = db.select(shownKeyColumns).from(apiKeys).where(eq(apiKeys.id, keyId)).get();
      return row && withKeyLists(row);
    },
    async revoke(keyId, at) {
      db.update(apiKeys).set({ revokedAt: at }).where(eq(apiKeys.id, keyId)).run();
    },
    async setExpiry(keyId, expiresAt) {
      db.update(apiKeys).set({ expiresAt }).where(eq(apiKeys.id, keyId)).run();
    },
    async setLimits(keyId, { maxConcurrency, tokensPer5h, tokensPerMonth, requestsPerMinute }) {
      db.update(apiKeys).set({ maxConcurrency, tokensPer5h, tokensPerMonth, requestsPerMinute }).where(eq(apiKeys.id, keyId)).run();
    },
    async setLists(keyId, lists) {
      db.update(apiKeys).set(keyListColumns(lists)).where(eq(apiKeys.id, keyId)).run();
    },
    async limited() {
      return sqlite
        .query<LimitedKey, []>(
          `SELECT id, organization_id AS organizationId, name, expires_at AS expiresAt, revoked_at AS revokedAt, max_concurrency AS maxConcurrency,
                  tokens_per_5h AS tokensPer5h, tokens_per_month AS tokensPerMonth, requests_per_minute AS requestsPerMinute
             FROM api_keys INDEXED BY api_keys_limited_idx WHERE ${limitedCondition}`,
        )
        .all();
    },
    async credentials(hash) {
      const row = lookup.get(hash);
      return row ? withCredentialLists(row) : undefined;
    },
  };
}

function accountRepository({ db }: DatabaseHandle): AccountRepository {
  // One process serves SQLite, so its failed sign-ins can live in memory.
  const failures = new Map<string, { count: number; since: number }>();
  const maxTrackedEmails = 10_000;
  return {
    async findUserByEmail(email) {
      return db.select().from(users).where(eq(users.email, email)).get();
    },
    async insertUser(user) {
      db.insert(users).values(user).run();
    },
    async openSession(session, now) {
      db.delete(sessions).where(lt(sessions.expiresAt, now)).run();
      db.insert(sessions).values(session).run();
    },
    async sessionUser(tokenHash, now) {
      return db
        .select({ userId: users.id, email: users.email, role: users.role, organizationId: users.organizationId, csrfToken: sessions.csrfToken })
        .from(sessions)
        .innerJoin(users, eq(users.id, sessions.userId))
        .where(and(eq(sessions.tokenHash, tokenHash), gt(sessions.expiresAt, now)))
        .get();
    },
    async closeSession(tokenHash) {
      db.delete(sessions).where(eq(sessions.tokenHash, tokenHash)).run();
    },
    async failures(email) {
      return failures.get(email);
    },
    async addFailure(email, now, windowStart) {
      const current = failures.get(email);
      // Guessing across many emails must not grow this map without end: past windows are dropped.
      if (failures.size > maxTrackedEmails) {
        for (const [key, entry] of failures) if (entry.since <= windowStart) failures.delete(key);
      }
      if (current && current.since > windowStart) current.count++;
      else failures.set(email, { count: 1, since: now });
    },
    async clearFailures(email) {
      failures.delete(email);
    },
    async insertToken(token) {
      db.insert(consoleTokens).values(token).run();
    },
    async listTokens(userId) {
      return tokenInfo()
        .where(userId === undefined ? undefined : eq(consoleTokens.userId, userId))
        .orderBy(desc(consoleTokens.createdAt))
        .all();
    },
    async findToken(id) {
      return tokenInfo().where(eq(consoleTokens.id, id)).get();
    },
    async revokeToken(id, at) {
      db.update(consoleTokens)
        .set({ revokedAt: at })
        .where(and(eq(consoleTokens.id, id), isNull(consoleTokens.revokedAt)))
        .run();
    },
    async tokenUser(tokenHash, now) {
      return db
        .select(tokenUserSelection(consoleTokens, users))
        .from(consoleTokens)
        .innerJoin(users, eq(users.id, consoleTokens.userId))
        .where(usableToken(consoleTokens, tokenHash, now))
        .get();
    },
    async touchToken(id, at) {
      db.update(consoleTokens)
        .set({ lastUsedAt: at })
        .where(usedBefore(consoleTokens, id, at))
        .run();
    },
  };

  function tokenInfo() {
    const { tokenHash: _hash, ...columns } = getTableColumns(consoleTokens);
    return db
      .select({ ...columns, email: users.email })
      .from(consoleTokens)
      .innerJoin(users, eq(users.id, consoleTokens.userId))
      .$dynamic();
  }
}

/**
 * Every committed ledger row, moved or still staged (ledger/inbox.ts), for the readers that show the newest rows.
 * SQLite applies each reader's WHERE to both halves, so usage_ledger's indexes still answer.
 */
const committedLedger = `(SELECT ${stagedColumns} FROM usage_ledger UNION ALL SELECT ${stagedColumns} FROM usage_ledger_inbox)`;

/** The token columns of usage_hours and usage_key_months, in the order a report sums them. */
const historyTokens = "tokens, prompt_tokens, completion_tokens, cached_tokens";

function usageRepository({ sqlite }: DatabaseHandle): UsageRepository {
  return {
    async read(now, organizationId) {
      const onlyOne = organizationId === undefined ? "" : "AND organization_id = ?2";
      const parameters = (first: number) => (organizationId === undefined ? [first] : [first, organizationId]);
      const windowRows = sqlite
        .query<{ organizationId: string; tokens: number; lastTime: number }, (string | number)[]>(
          `SELECT organization_id AS organizationId, tokens, last_time AS lastTime FROM usage_minutes
            WHERE minute >= ?1 ${onlyOne} ORDER BY last_time`,
        )
        .all(...parameters(usageWindowStart(now)));
      const monthRows = sqlite
        .query<{ organizationId: string; tokens: number }, (string | number)[]>(
          `SELECT organization_id AS organizationId, tokens FROM usage_months WHERE month = ?1 ${onlyOne}`,
        )
        .all(...parameters(monthOf(now)));
      return usageByOrganization(windowRows, monthRows);
    },
    async prune(now) {
      sqlite.run("DELETE FROM usage_minutes WHERE minute < ?", [oldestNeededMinute(now)]);
    },
    async reset(organizationId, at) {
      // The aggregates are rebuilt from the rows after the reset in one transaction, so rows the server commits
      // meanwhile are neither lost nor counted twice.
      sqlite.transaction(() => {
        // Staged rows first, so that the rebuild sees every row (ledger/inbox.ts).
        moveStagedRows(sqlite);
        sqlite.run(
          "INSERT INTO usage_resets (organization_id, reset_at) VALUES (?1, ?2) ON CONFLICT(organization_id) DO UPDATE SET reset_at = excluded.reset_at",
          [organizationId, at],
        );
        sqlite.run("DELETE FROM usage_minutes WHERE organization_id = ?", [organizationId]);
        sqlite.run("DELETE FROM usage_months WHERE organization_id = ?", [organizationId]);
        const fold = new UsageFold();
        const rows = sqlite
          .query<{ tokens: number; endedAt: number }, [string, number]>(
            `SELECT ${quotaTokensSql} AS tokens, ended_at AS endedAt FROM usage_ledger WHERE organization_id = ? AND ended_at > ?`,
          )
          .all(organizationId, at);
        for (const row of rows) fold.add(organizationId, row.tokens, row.endedAt);
        addToAggregates(sqlite, fold);
      })();
    },
    async resets() {
      const rows = sqlite
        .query<{ organizationId: string; resetAt: number }, []>("SELECT organization_id AS organizationId, reset_at AS resetAt FROM usage_resets")
        .all();
      return new Map(rows.map((row) => [row.organizationId, row.resetAt]));
    },
    async startsSince(since) {
      return sqlite
        .query<RequestStart, [number]>(
          `SELECT organization_id AS organizationId, key_id AS keyId, started_at AS startedAt FROM ${committedLedger}
            WHERE ended_at >= ?1 AND started_at >= ?1 ORDER BY started_at`,
        )
        .all(since);
    },
    async keyUsage(keyId, now) {
      const resetAt =
        sqlite
          .query<{ resetAt: number }, [string]>(
            "SELECT r.reset_at AS resetAt FROM usage_resets r JOIN api_keys k ON k.organization_id = r.organization_id WHERE k.id = ?",
          )
          .get(keyId)?.resetAt ?? 0;
      const windowStart = Math.max(usageWindowStart(now) * bucketMs, resetAt + 1);
      const buckets = sqlite
        .query<LedgerBucket, [number, string, number]>(
          `SELECT sum(${quotaTokensSql}) AS tokens, max(ended_at) AS lastTime FROM ${committedLedger}
            WHERE key_id = ?2 AND ended_at >= ?3 GROUP BY ended_at / ?1 ORDER BY lastTime`,
        )
        .all(bucketMs, keyId, windowStart);
      // The month's whole hours from usage_hours, which holds the moved rows; the rows still staged, and those of the
      // hour the month (or the last reset) starts in, from the ledger. The work does not grow with the month's rows.
      const from = Math.max(startOfMonth(now), resetAt + 1);
      const firstWholeHour = Math.ceil(from / hourMs);
      const month = sqlite
        .query<{ tokens: number | null }, [string, number, number, number]>(
          `SELECT (SELECT coalesce(sum(quota_tokens), 0) FROM usage_hours WHERE key_id = ?1 AND hour >= ?4)
                + (SELECT coalesce(sum(${quotaTokensSql}), 0) FROM ${committedLedger} WHERE key_id = ?1 AND ended_at >= ?2 AND ended_at < ?3)
                + (SELECT coalesce(sum(${quotaTokensSql}), 0) FROM usage_ledger_inbox WHERE key_id = ?1 AND ended_at >= ?3) AS tokens`,
        )
        .get(keyId, from, firstWholeHour * hourMs, firstWholeHour);
      return { buckets, monthTokens: month?.tokens ?? 0 };
    },
    async hourly(organizationId, since): Promise<HourlyUsage[]> {
      // usage_hours holds every moved row; the few rows still staged are summed beside it.
      return sqlite
        .query<HourlyUsage, [string, number, number]>(
          `SELECT usage.hour AS hour, usage.model AS model, coalesce(k.name, usage.key_id) AS keyName, sum(usage.tokens) AS tokens
             FROM (SELECT hour, model, key_id, tokens FROM usage_hours WHERE organization_id = ?1 AND hour >= ?2
                   UNION ALL
                   SELECT ended_at / ${hourMs}, model, key_id, prompt_tokens + completion_tokens FROM usage_ledger_inbox
                    WHERE organization_id = ?1 AND ended_at >= ?3) AS usage
             LEFT JOIN api_keys k ON k.id = usage.key_id
            GROUP BY usage.hour, usage.model, usage.key_id`,
        )
        .all(organizationId, Math.floor(since / hourMs), since);
    },
    async report({ firstHour, endHour, month, organizationId, by }): Promise<UsageReportRow[]> {
      // Read per organization along the aggregate's primary key (organization, month or hour, …): a month or a range of
      // hours alone has no index. The few rows still staged are summed beside it, as in hourly.
      const byModel = by === "model";
      const organizations = "organization_id IN (SELECT id FROM organizations WHERE $organization IS NULL OR id = $organization)";
      const aggregated =
        month === undefined
          ? `SELECT organization_id, model, key_id, ${historyTokens} FROM usage_hours WHERE ${organizations} AND hour >= $firstHour AND hour < $endHour`
          : `SELECT organization_id, model, key_id, ${historyTokens} FROM usage_key_months WHERE ${organizations} AND month = $month`;
      return sqlite
        .query<UsageReportRow, Record<string, string | number | null>>(
          `SELECT usage.organization_id AS organizationId, o.name AS organization,
                  ${byModel ? "usage.model" : "coalesce(k.name, usage.key_id)"} AS "group",
                  ${byModel ? "NULL" : "usage.key_id"} AS keyId, sum(usage.tokens) AS tokens, sum(usage.prompt_tokens) AS promptTokens,
                  sum(usage.completion_tokens) AS completionTokens, sum(usage.cached_tokens) AS cachedTokens
             FROM (${aggregated}
                   UNION ALL
                   SELECT organization_id, model, key_id, prompt_tokens + completion_tokens, prompt_tokens, completion_tokens, cached_tokens
                     FROM usage_ledger_inbox
                    WHERE ended_at >= $since AND ended_at < $until AND ($organization IS NULL OR organization_id = $organization)) AS usage
             JOIN organizations o ON o.id = usage.organization_id
             LEFT JOIN api_keys k ON k.id = usage.key_id
            GROUP BY usage.organization_id, ${byModel ? "usage.model" : "usage.key_id"}
            ORDER BY lower(o.name), o.name, tokens DESC, "group"`,
        )
        .all({ firstHour, endHour, since: firstHour * hourMs, until: endHour * hourMs, organization: organizationId ?? null, month: month ?? null });
    },
    async refusalsByRule(since): Promise<RefusalCount[]> {
      return sqlite
        .query<RefusalCount, [number]>(
          `SELECT rule_id AS ruleId, count(*) AS count, max(ended_at) AS last FROM ${committedLedger}
            WHERE outcome = 'content_filter' AND ended_at >= ? GROUP BY rule_id ORDER BY count DESC, rule_id`,
        )
        .all(since);
    },
    async recentRefusals(since, limit): Promise<RecentRefusal[]> {
      return sqlite
        .query<RecentRefusal, [number, number]>(
          `SELECT l.ended_at AS endedAt, l.request_id AS requestId, o.name AS organization, l.model AS model, l.rule_id AS ruleId
             FROM ${committedLedger} l LEFT JOIN organizations o ON o.id = l.organization_id
            WHERE l.outcome = 'content_filter' AND l.ended_at >= ? ORDER BY l.ended_at DESC LIMIT ?`,
        )
        .all(since, limit);
    },
  };
}

/**
 * The request log's query over usage_ledger, or over the rows still staged (ledger/inbox.ts, a few milliseconds'
 * worth); exported so that a test can ask SQLite which index answers it.
 */
export function requestLogQuery({ db }: DatabaseHandle, filter: RequestLogFilter, table: typeof usageLedger | typeof usageLedgerInbox = usageLedger) {
  return db
    .select({ ...requestLogColumns(table), organization: organizations.name, keyName: apiKeys.name })
    .from(table)
    .leftJoin(organizations, eq(organizations.id, table.organizationId))
    .leftJoin(apiKeys, eq(apiKeys.id, table.keyId))
    .where(requestLogConditions(table, filter, sqliteCommon))
    .orderBy(desc(table.endedAt), desc(table.requestId))
    .limit(filter.limit);
}

/** Newest first, as the request log orders: ended_at, then request id. */
function newestFirst(left: RequestLogRow, right: RequestLogRow): number {
  if (left.endedAt !== right.endedAt) return right.endedAt - left.endedAt;
  return left.requestId < right.requestId ? 1 : left.requestId > right.requestId ? -1 : 0;
}

function requestLogRepository(database: DatabaseHandle): RequestLogRepository {
  return {
    async page(filter) {
      // Both reads in one transaction, so one snapshot: a move that lands between them would otherwise hide its
      // rows from both (the writer thread moves rows at any moment).
      const { moved, staged } = database.sqlite.transaction(
        (): Record<"moved" | "staged", RequestLogRow[]> => ({
          moved: requestLogQuery(database, filter).all(),
          staged: requestLogQuery(database, filter, usageLedgerInbox).all(),
        }),
      )();
      if (staged.length === 0) return moved;
      return [...moved, ...staged].sort(newestFirst).slice(0, filter.limit);
    },
    async deleteBefore(before, limit) {
      const { sqlite } = database;
      // Not waiting for the lock: this runs on the server's thread, which must not stop for the writer's moves.
      const waitMs = sqlite.query<{ timeout: number }, []>("PRAGMA busy_timeout").get()?.timeout ?? 0;
      sqlite.run("PRAGMA busy_timeout = 0");
      try {
        return sqlite.run("DELETE FROM usage_ledger WHERE rowid IN (SELECT rowid FROM usage_ledger WHERE ended_at < ? ORDER BY ended_at LIMIT ?)", [
          before,
          limit,
        ]).changes;
      } finally {
        sqlite.run(`PRAGMA busy_timeout = ${waitMs}`);
      }
    },
  };
}

function auditRepository({ db }: DatabaseHandle): AuditRepository {
  return {
    async insert(entry) {
      db.insert(auditLog)
        .values({ ...entry, changes: entry.changes === null ? null : JSON.stringify(entry.changes) })
        .run();
    },
    async list(filter) {
      const rows = db.select().from(auditLog).where(auditConditions(auditLog, filter)).orderBy(desc(auditLog.id)).limit(filter.limit).all();
      return rows.map((row) => ({
        ...row,
        actorKind: row.actorKind as AuditEntry["actorKind"],
        changes: row.changes === null ? null : JSON.parse(row.changes),
      }));
    },
  };
}

function ledgerStore(ledger: Ledger): LedgerStore {
  return {
    record: (row) => ledger.record(row),
    touchKeys: (entries) => ledger.touchKeys(entries),
    async flush() {
      ledger.flush();
    },
    async close() {
      ledger.close();
    },
  };
}

export type SqliteStorage = Storage & { kind: "sqlite"; database: DatabaseHandle };

/** Whether a storage is the SQLite one, whose file some commands (backup, doctor) work on directly. */
export function isSqliteStorage(storage: Storage): storage is SqliteStorage {
  return storage.kind === "sqlite" && "database" in storage;
}

/** Storage over one SQLite file (or `:memory:`), with its writer thread for a serving process. */
export function sqliteStorage(database: DatabaseHandle): SqliteStorage {
  const listeners: (() => void | Promise<void>)[] = [];
  let ledger: Ledger | undefined;
  let running: Promise<unknown> | undefined;
  database.onExternalChange(() => {
    running = Promise.all(listeners.map((listener) => listener()));
  });
  const changes: ChangeFeed = {
    onChange: (listener) => listeners.push(listener),
    check() {
      // Synchronous unless something changed: the hot path pays one statement (once a turn, see AuthService), not a promise.
      database.pollExternalChanges();
      if (running === undefined) return;
      const finished = running;
      running = undefined;
      return finished.then(() => {});
    },
    // SQLite's triggers raise change_counter with every such write (migration 0006).
    announce: async () => {},
  };
  return {
    kind: "sqlite" as const,
    database,
    organizations: organizationRepository(database),
    keys: keyRepository(database),
    accounts: accountRepository(database),
    usage: usageRepository(database),
    requestLog: requestLogRepository(database),
    audit: auditRepository(database),
    changes,
    openLedger(onRefused) {
      ledger = new Ledger(database.sqlite, onRefused);
      if (ledger.staging) database.readChangesOn(ledger.staging);
      return ledgerStore(ledger);
    },
    // A writer thread that could not start records nothing: requests are refused before their upstream is called
    // rather than answered by the model and then withheld for want of their row.
    available: () => ledger?.problem() === undefined,
    async problems() {
      const ledgerProblem = ledger?.problem();
      if (ledgerProblem) return [`ledger not recording: ${ledgerProblem}`];
      try {
        database.sqlite.run("BEGIN IMMEDIATE");
        database.sqlite.run("ROLLBACK");
        return [];
      } catch (error) {
        return [`database not writable: ${(error as Error).message}`];
      }
    },
    async close() {
      database.close();
    },
  };
}

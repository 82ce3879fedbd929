// The PostgreSQL backend of shared mode: the durable truth of every instance (tenants, accounts, sessions, the
// ledger and its aggregates), through Drizzle over Bun's built-in SQL client.
import { SQL } from "bun";
import { type AnyColumn, and, asc, desc, eq, getTableColumns, gt, gte, inArray, isNull, lt, sql } from "drizzle-orm";
import { drizzle, type BunSQLDatabase } from "drizzle-orm/bun-sql";
import * as schema from "../db/postgres/schema";
import { migratePostgres } from "../db/postgres/migrate";
import { PostgresLedger } from "../ledger/postgres-ledger";
import { bucketMs, hourMs, monthOf, startOfMonth } from "../usage-periods";
import { UsageFold } from "../ledger/usage-fold";
import { oldestNeededMinute, usageByOrganization, usageWindowStart } from "./usage-rows";
import { auditConditions, requestLogColumns, requestLogConditions } from "./log-conditions";
import type {
  AccountRepository,
  AuditEntry,
  AuditRepository,
  ChangeFeed,
  KeyRepository,
  OrganizationRepository,
  RequestLogRepository,
  Storage,
  UsageRepository,
} from "./types";
import { tokenUserSelection, usableToken, usedBefore } from "./token-columns";
import { keyListColumns, listText, withCredentialLists, withKeyLists, withNetworkList } from "./key-lists";
import { withTimeout } from "./with-timeout";

type Database = BunSQLDatabase<typeof schema>;
const {
  apiKeys,
  auditLog,
  consoleTokens,
  organizations,
  sessions,
  signInFailures,
  usageHours,
  usageKeyMonths,
  usageLedger,
  usageMinutes,
  usageMonths,
  usageResets,
  users,
} = schema;

/** Every query that a request waits for gives up after this long (PostgreSQL stopped, a dead link). */
export const postgresTimeoutMs = 3000;
const healthIntervalMs = 1000;

function timed<T>(promise: Promise<T>): Promise<T> {
  return withTimeout(promise, postgresTimeoutMs, "PostgreSQL");
}

/** Every column of a key but its hash. */
const { hash: _hash, ...shownKeyColumns } = getTableColumns(apiKeys);

function organizationRepository(db: Database): OrganizationRepository {
  return {
    async insert(row) {
      await timed(db.insert(organizations).values({ ...row, networks: listText(row.networks ?? null) }));
    },
    async update(id, changes) {
      await timed(
        db
          .update(organizations)
          .set({ ...changes, networks: listText(changes.networks) })
          .where(eq(organizations.id, id)),
      );
    },
    async list() {
      return (await timed(db.select().from(organizations).orderBy(asc(organizations.createdAt)))).map(withNetworkList);
    },
    async findById(id) {
      const row = (await timed(db.select().from(organizations).where(eq(organizations.id, id)).limit(1)))[0];
      return row && withNetworkList(row);
    },
    async findByName(name) {
      const row = (await timed(db.select().from(organizations).where(eq(organizations.name, name)).limit(1)))[0];
      return row && withNetworkList(row);
    },
  };
}

function keyRepository(db: Database): KeyRepository {
  return {
    async insert(row) {
      await timed(db.insert(apiKeys).values({ ...row, ...keyListColumns(row) }));
    },
    async listForOrganization(organizationId) {
      const rows = await timed(db.select(shownKeyColumns).from(apiKeys).where(eq(apiKeys.organizationId, organizationId)).orderBy(asc(apiKeys.createdAt)));
      return rows.map(withKeyLists);
    },
    async find(keyId) {
      const row = (await timed(db.select(shownKeyColumns).from(apiKeys).where(eq(apiKeys.id, keyId)).limit(1)))[0];
      return row && withKeyLists(row);
    },
    async revoke(keyId, at) {
      await timed(db.update(apiKeys).set({ revokedAt: at }).where(eq(apiKeys.id, keyId)));
    },
    async setExpiry(keyId, expiresAt) {
      await timed(db.update(apiKeys).set({ expiresAt }).where(eq(apiKeys.id, keyId)));
    },
    async setLimits(keyId, { maxConcurrency, tokensPer5h, tokensPerMonth, requestsPerMinute }) {
      await timed(db.update(apiKeys).set({ maxConcurrency, tokensPer5h, tokensPerMonth, requestsPerMinute }).where(eq(apiKeys.id, keyId)));
    },
    async setLists(keyId, lists) {
      await timed(db.update(apiKeys).set(keyListColumns(lists)).where(eq(apiKeys.id, keyId)));
    },
    async limited() {
      return await timed(
        db
          .select({
            id: apiKeys.id,
            organizationId: apiKeys.organizationId,
            name: apiKeys.name,
            expiresAt: apiKeys.expiresAt,
            revokedAt: apiKeys.revokedAt,
            maxConcurrency: apiKeys.maxConcurrency,
            tokensPer5h: apiKeys.tokensPer5h,
            tokensPerMonth: apiKeys.tokensPerMonth,
            requestsPerMinute: apiKeys.requestsPerMinute,
          })
          .from(apiKeys)
          .where(sql`max_concurrency IS NOT NULL OR tokens_per_5h IS NOT NULL OR tokens_per_month IS NOT NULL OR requests_per_minute IS NOT NULL`),
      );
    },
    async credentials(hash) {
      const rows = await timed(
        db
          .select({
            hash: apiKeys.hash,
            keyId: apiKeys.id,
            organizationId: organizations.id,
            organizationName: organizations.name,
            organizationStatus: organizations.status,
            planId: organizations.plan,
            expiresAt: apiKeys.expiresAt,
            revokedAt: apiKeys.revokedAt,
            maxConcurrency: apiKeys.maxConcurrency,
            tokensPer5h: apiKeys.tokensPer5h,
            tokensPerMonth: apiKeys.tokensPerMonth,
            requestsPerMinute: apiKeys.requestsPerMinute,
            models: apiKeys.models,
            networks: apiKeys.networks,
            organizationNetworks: organizations.networks,
          })
          .from(apiKeys)
          .innerJoin(organizations, eq(organizations.id, apiKeys.organizationId))
          .where(eq(apiKeys.hash, hash))
          .limit(1),
      );
      const row = rows[0];
      return row && withCredentialLists(row);
    },
  };
}

function accountRepository(db: Database): AccountRepository {
  return {
    async findUserByEmail(email) {
      return (await timed(db.select().from(users).where(eq(users.email, email)).limit(1)))[0];
    },
    async insertUser(user) {
      await timed(db.insert(users).values(user));
    },
    async openSession(session, now) {
      await timed(db.delete(sessions).where(lt(sessions.expiresAt, now)));
      await timed(db.insert(sessions).values(session));
    },
    async sessionUser(tokenHash, now) {
      const rows = await timed(
        db
          .select({ userId: users.id, email: users.email, role: users.role, organizationId: users.organizationId, csrfToken: sessions.csrfToken })
          .from(sessions)
          .innerJoin(users, eq(users.id, sessions.userId))
          .where(and(eq(sessions.tokenHash, tokenHash), gt(sessions.expiresAt, now)))
          .limit(1),
      );
      return rows[0];
    },
    async closeSession(tokenHash) {
      await timed(db.delete(sessions).where(eq(sessions.tokenHash, tokenHash)));
    },
    async failures(email) {
      return (
        await timed(
          db.select({ count: signInFailures.count, since: signInFailures.since }).from(signInFailures).where(eq(signInFailures.email, email)).limit(1),
        )
      )[0];
    },
    async addFailure(email, now, windowStart) {
      // One statement, so that failures counted by several instances at once all count.
      await timed(
        db
          .insert(signInFailures)
          .values({ email, count: 1, since: now })
          .onConflictDoUpdate({
            target: signInFailures.email,
            set: {
              count: sql`CASE WHEN ${signInFailures.since} > ${windowStart} THEN ${signInFailures.count} + 1 ELSE 1 END`,
              since: sql`CASE WHEN ${signInFailures.since} > ${windowStart} THEN ${signInFailures.since} ELSE ${now}::bigint END`,
            },
          }),
      );
    },
    async clearFailures(email) {
      await timed(db.delete(signInFailures).where(eq(signInFailures.email, email)));
    },
    async insertToken(token) {
      await timed(db.insert(consoleTokens).values(token));
    },
    async listTokens(userId) {
      return await timed(
        tokenInfo()
          .where(userId === undefined ? undefined : eq(consoleTokens.userId, userId))
          .orderBy(desc(consoleTokens.createdAt)),
      );
    },
    async findToken(id) {
      return (await timed(tokenInfo().where(eq(consoleTokens.id, id)).limit(1)))[0];
    },
    async revokeToken(id, at) {
      await timed(
        db
          .update(consoleTokens)
          .set({ revokedAt: at })
          .where(and(eq(consoleTokens.id, id), isNull(consoleTokens.revokedAt))),
      );
    },
    async tokenUser(tokenHash, now) {
      const rows = await timed(
        db
          .select(tokenUserSelection(consoleTokens, users))
          .from(consoleTokens)
          .innerJoin(users, eq(users.id, consoleTokens.userId))
          .where(usableToken(consoleTokens, tokenHash, now))
          .limit(1),
      );
      return rows[0];
    },
    async touchToken(id, at) {
      await timed(
        db
          .update(consoleTokens)
          .set({ lastUsedAt: at })
          .where(usedBefore(consoleTokens, id, at)),
      );
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

/** What a ledger row counts against the token quotas (see LedgerRow.quotaTokens). */
const quotaTokensOf = sql`coalesce(${usageLedger.quotaTokens}, ${usageLedger.promptTokens} + ${usageLedger.completionTokens})`;

function usageRepository(db: Database): UsageRepository {
  return {
    async read(now, organizationId) {
      const windowStart = usageWindowStart(now);
      const [windowRows, monthRows] = await Promise.all([
        timed(
          db
            .select({ organizationId: usageMinutes.organizationId, tokens: usageMinutes.tokens, lastTime: usageMinutes.lastTime })
            .from(usageMinutes)
            .where(
              organizationId === undefined
                ? gte(usageMinutes.minute, windowStart)
                : and(gte(usageMinutes.minute, windowStart), eq(usageMinutes.organizationId, organizationId)),
            )
            .orderBy(asc(usageMinutes.lastTime)),
        ),
        timed(
          db
            .select({ organizationId: usageMonths.organizationId, tokens: usageMonths.tokens })
            .from(usageMonths)
            .where(
              organizationId === undefined
                ? eq(usageMonths.month, monthOf(now))
                : and(eq(usageMonths.month, monthOf(now)), eq(usageMonths.organizationId, organizationId)),
            ),
        ),
      ]);
      return usageByOrganization(windowRows, monthRows);
    },
    async prune(now) {
      await timed(db.delete(usageMinutes).where(lt(usageMinutes.minute, oldestNeededMinute(now))));
    },
    async reset(organizationId, at) {
      // Rebuilt from the rows after the reset in one transaction; the lock on the reset row orders concurrent resets.
      await timed(
        db.transaction(async (transaction) => {
          await transaction
            .insert(usageResets)
            .values({ organizationId, resetAt: at })
            .onConflictDoUpdate({ target: usageResets.organizationId, set: { resetAt: at } });
          await transaction.delete(usageMinutes).where(eq(usageMinutes.organizationId, organizationId));
          await transaction.delete(usageMonths).where(eq(usageMonths.organizationId, organizationId));
          const rows = await transaction
            .select({ endedAt: usageLedger.endedAt, tokens: sql<number>`${quotaTokensOf}`.mapWith(Number) })
            .from(usageLedger)
            .where(and(eq(usageLedger.organizationId, organizationId), gt(usageLedger.endedAt, at)));
          const fold = new UsageFold();
          for (const row of rows) fold.add(organizationId, row.tokens, row.endedAt);
          const minutes = fold.minuteTotals();
          const months = fold.monthTotals();
          if (minutes.length > 0) await transaction.insert(usageMinutes).values(minutes);
          if (months.length > 0) await transaction.insert(usageMonths).values(months);
        }),
      );
    },
    async resets() {
      const rows = await timed(db.select().from(usageResets));
      return new Map(rows.map((row) => [row.organizationId, row.resetAt]));
    },
    async startsSince(since) {
      return await timed(
        db
          .select({ organizationId: usageLedger.organizationId, keyId: usageLedger.keyId, startedAt: usageLedger.startedAt })
          .from(usageLedger)
          .where(and(gte(usageLedger.endedAt, since), gte(usageLedger.startedAt, since)))
          .orderBy(asc(usageLedger.startedAt)),
      );
    },
    async keyUsage(keyId, now) {
      const [reset] = await timed(
        db
          .select({ resetAt: usageResets.resetAt })
          .from(usageResets)
          .innerJoin(apiKeys, eq(apiKeys.organizationId, usageResets.organizationId))
          .where(eq(apiKeys.id, keyId)),
      );
      const resetAt = reset?.resetAt ?? 0;
      const tokens = sql<number>`sum(${quotaTokensOf})`.mapWith(Number);
      const buckets = await timed(
        db
          .select({ tokens, lastTime: sql<number>`max(${usageLedger.endedAt})`.mapWith(Number) })
          .from(usageLedger)
          .where(and(eq(usageLedger.keyId, keyId), gte(usageLedger.endedAt, Math.max(usageWindowStart(now) * bucketMs, resetAt + 1))))
          .groupBy(sql`${usageLedger.endedAt} / ${sql.raw(String(bucketMs))}`)
          .orderBy(sql`2`),
      );
      // The month's whole hours from usage_hours; the rows of the hour the month (or the last reset) starts in
      // from the ledger. The work does not grow with the month's rows.
      const from = Math.max(startOfMonth(now), resetAt + 1);
      const firstWholeHour = Math.ceil(from / hourMs);
      const [hours] = await timed(
        db
          .select({ tokens: sql<number>`coalesce(sum(${usageHours.quotaTokens}), 0)`.mapWith(Number) })
          .from(usageHours)
          .where(and(eq(usageHours.keyId, keyId), gte(usageHours.hour, firstWholeHour))),
      );
      const [firstHour] = await timed(
        db
          .select({ tokens: sql<number>`coalesce(sum(${quotaTokensOf}), 0)`.mapWith(Number) })
          .from(usageLedger)
          .where(and(eq(usageLedger.keyId, keyId), gte(usageLedger.endedAt, from), lt(usageLedger.endedAt, firstWholeHour * hourMs))),
      );
      return { buckets, monthTokens: (hours?.tokens ?? 0) + (firstHour?.tokens ?? 0) };
    },
    async hourly(organizationId, since) {
      const rows = await timed(
        db
          .select({
            hour: usageHours.hour,
            model: usageHours.model,
            keyName: sql<string>`coalesce(${apiKeys.name}, ${usageHours.keyId})`,
            tokens: sql<number>`sum(${usageHours.tokens})`.mapWith(Number),
          })
          .from(usageHours)
          .leftJoin(apiKeys, eq(apiKeys.id, usageHours.keyId))
          .where(and(eq(usageHours.organizationId, organizationId), gte(usageHours.hour, Math.floor(since / hourMs))))
          .groupBy(usageHours.hour, usageHours.model, usageHours.keyId, apiKeys.name),
      );
      return rows;
    },
    async report({ firstHour, endHour, month, organizationId, by }) {
      // Per organization along the aggregate's primary key (organization, month or hour, …): a month or a range of
      // hours alone has no index.
      const source = month === undefined ? usageHours : usageKeyMonths;
      const period = month === undefined ? and(gte(usageHours.hour, firstHour), lt(usageHours.hour, endHour)) : eq(usageKeyMonths.month, month);
      const organizationIds = db
        .select({ id: organizations.id })
        .from(organizations)
        .where(organizationId === undefined ? undefined : eq(organizations.id, organizationId));
      const byModel = by === "model";
      const tokens = sql<number>`sum(${source.tokens})`.mapWith(Number);
      const sumOf = (column: AnyColumn) => sql<number>`sum(${column})`.mapWith(Number);
      const group = byModel ? sql<string>`${source.model}` : sql<string>`coalesce(${apiKeys.name}, ${source.keyId})`;
      return await timed(
        db
          .select({
            organizationId: sql<string>`${source.organizationId}`,
            organization: organizations.name,
            group,
            keyId: byModel ? sql<null>`NULL` : sql<string>`${source.keyId}`,
            tokens,
            promptTokens: sumOf(source.promptTokens),
            completionTokens: sumOf(source.completionTokens),
            cachedTokens: sumOf(source.cachedTokens),
          })
          .from(source)
          .innerJoin(organizations, eq(organizations.id, source.organizationId))
          .leftJoin(apiKeys, eq(apiKeys.id, source.keyId))
          .where(and(inArray(source.organizationId, organizationIds), period))
          .groupBy(source.organizationId, organizations.name, ...(byModel ? [source.model] : [source.keyId, apiKeys.name]))
          .orderBy(sql`lower(${organizations.name})`, organizations.name, desc(tokens), group),
      );
    },
    async refusalsByRule(since) {
      return await timed(
        db
          .select({
            ruleId: sql<string>`${usageLedger.ruleId}`,
            count: sql<number>`count(*)`.mapWith(Number),
            last: sql<number>`max(${usageLedger.endedAt})`.mapWith(Number),
          })
          .from(usageLedger)
          .where(and(eq(usageLedger.outcome, "content_filter"), gte(usageLedger.endedAt, since)))
          .groupBy(usageLedger.ruleId)
          .orderBy(desc(sql`count(*)`), asc(usageLedger.ruleId)),
      );
    },
    async recentRefusals(since, limit) {
      return await timed(
        db
          .select({
            endedAt: usageLedger.endedAt,
            requestId: usageLedger.requestId,
            organization: organizations.name,
            model: usageLedger.model,
            ruleId: sql<string>`${usageLedger.ruleId}`,
          })
          .from(usageLedger)
          .leftJoin(organizations, eq(organizations.id, usageLedger.organizationId))
          .where(and(eq(usageLedger.outcome, "content_filter"), gte(usageLedger.endedAt, since)))
          .orderBy(desc(usageLedger.endedAt))
          .limit(limit),
      );
    },
  };
}

function requestLogRepository(db: Database): RequestLogRepository {
  const columns = { ...requestLogColumns(usageLedger), organization: organizations.name, keyName: apiKeys.name };
  return {
    async page(filter) {
      return await timed(
        db
          .select(columns)
          .from(usageLedger)
          .leftJoin(organizations, eq(organizations.id, usageLedger.organizationId))
          .leftJoin(apiKeys, eq(apiKeys.id, usageLedger.keyId))
          .where(requestLogConditions(usageLedger, filter))
          .orderBy(desc(usageLedger.endedAt), desc(usageLedger.requestId))
          .limit(filter.limit),
      );
    },
    async deleteBefore(before, limit) {
      // Rows another instance's run is deleting are passed over, not waited for.
      const oldest = db
        .select({ requestId: usageLedger.requestId })
        .from(usageLedger)
        .where(lt(usageLedger.endedAt, before))
        .orderBy(usageLedger.endedAt)
        .limit(limit)
        .for("update", { skipLocked: true });
      const deleted = await timed(db.delete(usageLedger).where(inArray(usageLedger.requestId, oldest)).returning({ requestId: usageLedger.requestId }));
      return deleted.length;
    },
  };
}

function auditRepository(db: Database): AuditRepository {
  return {
    async insert(entry) {
      await timed(db.insert(auditLog).values({ ...entry, changes: entry.changes === null ? null : JSON.stringify(entry.changes) }));
    },
    async list(filter) {
      const rows = await timed(db.select().from(auditLog).where(auditConditions(auditLog, filter)).orderBy(desc(auditLog.id)).limit(filter.limit));
      return rows.map((row) => ({
        ...row,
        actorKind: row.actorKind as AuditEntry["actorKind"],
        changes: row.changes === null ? null : JSON.parse(row.changes),
      }));
    },
  };
}

/**
 * Connects to PostgreSQL, applies pending migrations (exactly once across instances starting together) and watches
 * whether it answers. `changes` tells instances about each other's changes (Redis in shared mode).
 */
export async function postgresStorage(url: string, changes: ChangeFeed): Promise<Storage & { client: SQL }> {
  const client = new SQL(url, { max: 16, connectionTimeout: postgresTimeoutMs / 1000, idleTimeout: 60 });
  await withTimeout(migratePostgres(client), 30_000, "PostgreSQL (migrations)");
  const db = drizzle({ client, schema });
  let available = true;
  let lastProblem = "";
  let closed = false;
  const check = async () => {
    try {
      await withTimeout(client`SELECT 1`, postgresTimeoutMs, "PostgreSQL");
      available = true;
      lastProblem = "";
    } catch (error) {
      available = false;
      lastProblem = (error as Error).message;
    }
  };
  const healthTimer = setInterval(() => void check(), healthIntervalMs);
  healthTimer.unref();
  return {
    kind: "postgres",
    client,
    organizations: organizationRepository(db),
    keys: keyRepository(db),
    accounts: accountRepository(db),
    usage: usageRepository(db),
    requestLog: requestLogRepository(db),
    audit: auditRepository(db),
    changes,
    openLedger(onRefused) {
      return new PostgresLedger(
        client,
        (ok) => {
          if (!ok) {
            available = false;
            void check();
          }
        },
        onRefused,
      );
    },
    available: () => available,
    async problems() {
      await check();
      return available ? [] : [`PostgreSQL does not answer: ${lastProblem}`];
    },
    async close() {
      if (closed) return;
      closed = true;
      clearInterval(healthTimer);
      await client.close({ timeout: 1 });
    },
  };
}

// The PostgreSQL repositories against a real server: the queries that the console, the CLI and admission's rebuild
// run, answered as the SQLite ones answer them.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { postgresStorage } from "../../src/storage/postgres";
import { maxRowsPerCommit, PostgresLedger } from "../../src/ledger/postgres-ledger";
import { migratePostgres } from "../../src/db/postgres/migrate";
import { postgresMigrations } from "../../src/db/postgres/migrations";
import { bucketMs, monthOf, startOfMonth } from "../../src/usage-periods";
import type { ChangeFeed, Storage } from "../../src/storage/types";
import { startPostgres, type PostgresServer } from "../support/services";
import { join } from "node:path";
import { openDatabase } from "../../src/db/client";
import { sqliteStorage } from "../../src/storage/sqlite";
import { ledgerRow, temporaryDirectory } from "../helpers";
import { AuditLog } from "../../src/modules/audit/service";
import { OrganizationExistsError, OrganizationService } from "../../src/modules/organizations/service";

let postgres: PostgresServer;
let storage: Storage;
let databaseUrl: string;
const quiet: ChangeFeed = { onChange() {}, check() {}, async announce() {} };

beforeAll(async () => {
  postgres = await startPostgres();
  databaseUrl = await postgres.createDatabase("repositories");
  storage = await postgresStorage(databaseUrl, quiet);
});
afterAll(async () => {
  await storage?.close();
  postgres?.stop();
});

/** A key with no expiry, never used, capped only by `tokensPerMonth` when given. */
function insertKey(id: string, organizationId: string, name: string, hash: string, tokensPerMonth: number | null = null): Promise<void> {
  return storage.keys.insert({
    id,
    organizationId,
    name,
    prefix: "sk-sluice-ab",
    hash,
    createdAt: 1,
    lastUsedAt: null,
    expiresAt: null,
    revokedAt: null,
    maxConcurrency: null,
    tokensPer5h: null,
    tokensPerMonth,
    requestsPerMinute: null,
    models: null,
    networks: null,
  });
}

test("ledger rows, aggregates, hourly series, refusals, last use and credentials", async () => {
  const ledger = storage.openLedger();
  await storage.organizations.insert({ id: "org_1", name: "acme", plan: "default", status: "active", createdAt: 1 });
  await insertKey("key_1", "org_1", "laptop", "h1");
  const now = Date.now();
  const row = (index: number) => ({
    requestId: `req_${index}`,
    organizationId: "org_1",
    keyId: "key_1",
    model: "m",
    promptTokens: 10,
    completionTokens: 5,
    reasoningTokens: 0,
    cachedTokens: 0,
    outcome: index === 3 ? ("content_filter" as const) : ("completed" as const),
    errorCode: null,
    ruleId: index === 3 ? "rule-1" : null,
    usageSource: "upstream" as const,
    startedAt: now,
    endedAt: now,
    firstTokenMs: index === 2 ? 40 : null,
  });
  await Promise.all([1, 2, 3].map((index) => ledger.record(row(index))));
  // A row recorded twice (a retry after a lost answer) counts once, in the ledger and in the aggregates.
  await ledger.record(row(1));
  ledger.touchKeys([["key_1", now]]);
  await ledger.flush();
  expect(await storage.usage.hourly("org_1", now - 3_600_000)).toEqual([{ hour: Math.floor(now / 3_600_000), model: "m", keyName: "laptop", tokens: 45 }]);
  const usage = (await storage.usage.read(now)).get("org_1");
  expect(usage?.monthTokens).toBe(45);
  expect(usage?.buckets.reduce((sum, bucket) => sum + bucket.tokens, 0)).toBe(45);
  expect(await storage.usage.refusalsByRule(0)).toEqual([{ ruleId: "rule-1", count: 1, last: now }]);
  expect(await storage.usage.recentRefusals(0, 5)).toEqual([{ endedAt: now, requestId: "req_3", organization: "acme", model: "m", ruleId: "rule-1" }]);
  expect((await storage.keys.find("key_1"))?.lastUsedAt).toBe(now);
  expect((await storage.keys.credentials("h1"))?.organizationName).toBe("acme");
  // A key's models: a list in, the same list out, through every read; null again is every model of the plan.
  expect((await storage.keys.credentials("h1"))?.models).toBeNull();
  await storage.keys.setLists("key_1", { models: ["m", "other"], networks: ["10.0.0.0/8"] });
  expect((await storage.keys.credentials("h1"))?.models).toEqual(["m", "other"]);
  expect((await storage.keys.find("key_1"))?.models).toEqual(["m", "other"]);
  expect(
    (await storage.keys.listForOrganization((await storage.keys.find("key_1"))?.organizationId as string)).find((key) => key.id === "key_1")?.models,
  ).toEqual(["m", "other"]);
  expect((await storage.keys.credentials("h1"))?.networks).toEqual(["10.0.0.0/8"]);
  expect((await storage.keys.find("key_1"))?.networks).toEqual(["10.0.0.0/8"]);
  // An organization's networks: a list in, the same list out, beside the key's in its credentials.
  expect((await storage.keys.credentials("h1"))?.organizationNetworks).toBeNull();
  await storage.organizations.update("org_1", { plan: "default", status: "active", networks: ["203.0.113.0/24"] });
  expect((await storage.keys.credentials("h1"))?.organizationNetworks).toEqual(["203.0.113.0/24"]);
  expect((await storage.organizations.findById("org_1"))?.networks).toEqual(["203.0.113.0/24"]);
  expect((await storage.organizations.list()).find((organization) => organization.id === "org_1")?.networks).toEqual(["203.0.113.0/24"]);
  await storage.organizations.update("org_1", { plan: "default", status: "active", networks: null });
  expect((await storage.organizations.findByName("acme"))?.networks).toBeNull();
  await storage.keys.setLists("key_1", { models: null, networks: null });
  expect((await storage.keys.find("key_1"))?.models).toBeNull();
  expect((await storage.keys.credentials("h1"))?.networks).toBeNull();
  // A reset: what ended before it stops counting; the aggregates are rebuilt from the rows after it.
  await storage.usage.reset("org_1", now);
  expect((await storage.usage.read(now)).get("org_1")).toBeUndefined();
  expect((await storage.usage.resets()).get("org_1")).toBe(now);
  await ledger.close();
});

test("a committed row keeps every field as recorded, and counts in the minute and UTC calendar month that monthOf gives, at a month's edges", async () => {
  const ledger = storage.openLedger();
  await storage.organizations.insert({ id: "org_edges", name: "edges", plan: "default", status: "active", createdAt: 1 });
  const times = [Date.UTC(2026, 10, 30, 23, 59, 59, 999), Date.UTC(2026, 11, 1), Date.UTC(2024, 1, 29, 12, 30, 1, 1), Date.UTC(2027, 0, 1) - 1];
  const rows = times.map((endedAt, index) => ({
    requestId: `req_edge_${index}`,
    organizationId: "org_edges",
    keyId: "key_edges",
    model: `model "${index}" é`,
    promptTokens: 10 + index,
    completionTokens: 5,
    reasoningTokens: index,
    cachedTokens: index * 3,
    outcome: "completed" as const,
    errorCode: index === 1 ? "upstream_error" : null,
    ruleId: null,
    usageSource: "tokenizer" as const,
    startedAt: endedAt - 1000,
    endedAt,
    firstTokenMs: index === 2 ? 40 : null,
  }));
  await Promise.all(rows.map((row) => ledger.record(row)));
  await ledger.close();
  const client = new Bun.SQL(databaseUrl);
  try {
    const stored = await client`SELECT * FROM usage_ledger WHERE organization_id = 'org_edges' ORDER BY request_id`;
    expect(
      stored.map((row: Record<string, unknown>) => ({
        requestId: row.request_id,
        organizationId: row.organization_id,
        keyId: row.key_id,
        model: row.model,
        promptTokens: Number(row.prompt_tokens),
        completionTokens: Number(row.completion_tokens),
        reasoningTokens: Number(row.reasoning_tokens),
        cachedTokens: Number(row.cached_tokens),
        outcome: row.outcome,
        errorCode: row.error_code,
        ruleId: row.rule_id,
        usageSource: row.usage_source,
        startedAt: Number(row.started_at),
        endedAt: Number(row.ended_at),
        firstTokenMs: row.first_token_ms === null ? null : Number(row.first_token_ms),
      })),
    ).toEqual(rows);
    const months = await client`SELECT month, tokens FROM usage_months WHERE organization_id = 'org_edges' ORDER BY month`;
    const expectedMonths = new Map<number, number>();
    for (const row of rows) expectedMonths.set(monthOf(row.endedAt), (expectedMonths.get(monthOf(row.endedAt)) ?? 0) + row.promptTokens + row.completionTokens);
    expect(months.map((row: { month: unknown; tokens: unknown }) => [Number(row.month), Number(row.tokens)])).toEqual(
      [...expectedMonths].sort((a, b) => a[0] - b[0]),
    );
    expect(expectedMonths.size).toBe(3);
    const minutes = await client`SELECT minute FROM usage_minutes WHERE organization_id = 'org_edges' ORDER BY minute`;
    expect(minutes.map((row: { minute: unknown }) => Number(row.minute))).toEqual(times.map((time) => Math.floor(time / bucketMs)).sort((a, b) => a - b));
  } finally {
    await client.close();
  }
});

test("usage_hours: the chart and a capped key's month answer what the rows say, across a reset in the middle of an hour; the migration fills it from older rows", async () => {
  const hourMs = 3_600_000;
  const now = Date.UTC(2026, 10, 26, 15, 40);
  await storage.organizations.insert({ id: "org_hours", name: "hours", plan: "default", status: "active", createdAt: 1 });
  for (const [id, name] of [
    ["key_h1", "laptop"],
    ["key_h2", "ci"],
  ] as const)
    await insertKey(id, "org_hours", name, `hash_${id}`, 1_000_000);
  let index = 0;
  const row = (keyId: string, model: string, endedAt: number, tokens: number) => ({
    requestId: `req_hours_${++index}`,
    organizationId: "org_hours",
    keyId,
    model,
    promptTokens: tokens,
    completionTokens: 1,
    reasoningTokens: 0,
    cachedTokens: 0,
    outcome: "completed" as const,
    errorCode: null,
    ruleId: null,
    usageSource: "upstream" as const,
    startedAt: endedAt - 100,
    endedAt,
    firstTokenMs: null,
  });
  const rows = [];
  for (let time = startOfMonth(now) - 2 * hourMs; time < now; time += 37 * 60_000 + (index % 7) * 60_000)
    rows.push(row(index % 3 === 0 ? "key_h2" : "key_h1", index % 5 === 0 ? "large" : "m", time, 10 + (index % 13)));
  const ledger = storage.openLedger();
  await Promise.all(rows.map((entry) => ledger.record(entry)));
  const client = new Bun.SQL(databaseUrl);
  try {
    const monthOfKey = async (keyId: string, from: number) =>
      Number(
        (
          await client`SELECT coalesce(sum(prompt_tokens + completion_tokens), 0) AS tokens FROM usage_ledger WHERE key_id = ${keyId} AND ended_at >= ${from}`
        )[0].tokens,
      );
    for (const keyId of ["key_h1", "key_h2"]) {
      expect(await monthOfKey(keyId, startOfMonth(now))).toBeGreaterThan(1000);
      expect((await storage.usage.keyUsage(keyId, now)).monthTokens).toBe(await monthOfKey(keyId, startOfMonth(now)));
    }
    const since = (Math.floor(now / hourMs) - 23) * hourMs;
    const direct = await client`SELECT ended_at / ${hourMs}::bigint AS hour, model, CASE key_id WHEN 'key_h1' THEN 'laptop' ELSE 'ci' END AS "keyName",
        sum(prompt_tokens + completion_tokens) AS tokens FROM usage_ledger WHERE organization_id = 'org_hours' AND ended_at >= ${since} GROUP BY 1, 2, 3`;
    const order = (left: { hour: number; model: string; keyName: string }, right: typeof left) =>
      left.hour - right.hour || left.model.localeCompare(right.model) || left.keyName.localeCompare(right.keyName);
    const expected = direct.map((entry: Record<string, unknown>) => ({
      hour: Number(entry.hour),
      model: entry.model,
      keyName: entry.keyName,
      tokens: Number(entry.tokens),
    }));
    expect(expected.length).toBeGreaterThan(10);
    expect([...(await storage.usage.hourly("org_hours", since))].sort(order)).toEqual(expected.sort(order));
    // A reset 17 minutes into an hour, then rows on both sides of it within that hour.
    const resetAt = now - 5 * hourMs - 17 * 60_000;
    await storage.usage.reset("org_hours", resetAt);
    await Promise.all([row("key_h1", "m", resetAt + 60_000, 100), row("key_h1", "m", resetAt - 60_000, 1000)].map((entry) => ledger.record(entry)));
    for (const keyId of ["key_h1", "key_h2"]) expect((await storage.usage.keyUsage(keyId, now)).monthTokens).toBe(await monthOfKey(keyId, resetAt + 1));
    await ledger.close();

    // A database migrated before usage_hours existed: the migration sums the rows it holds.
    const olderUrl = await postgres.createDatabase("before_usage_hours");
    const older = new Bun.SQL(olderUrl);
    try {
      await migratePostgres(
        older,
        postgresMigrations.filter((migration) => migration.tag < "0003_usage_hours"),
      );
      await older`INSERT INTO usage_ledger SELECT * FROM json_populate_recordset(NULL::usage_ledger, ${JSON.stringify(
        rows.map((entry) => ({
          request_id: entry.requestId,
          organization_id: entry.organizationId,
          key_id: entry.keyId,
          model: entry.model,
          prompt_tokens: entry.promptTokens,
          completion_tokens: entry.completionTokens,
          reasoning_tokens: 0,
          outcome: entry.outcome,
          usage_source: entry.usageSource,
          started_at: entry.startedAt,
          ended_at: entry.endedAt,
        })),
      )}::text::json)`;
      expect(await migratePostgres(older)).toEqual(postgresMigrations.map((migration) => migration.tag).filter((tag) => tag >= "0003_usage_hours"));
      const [sums] =
        await older`SELECT (SELECT sum(tokens) FROM usage_hours) AS hours, (SELECT sum(prompt_tokens + completion_tokens) FROM usage_ledger) AS rows,
          (SELECT sum(tokens) FROM usage_key_months) AS key_months,
          (SELECT count(*) FROM usage_hours) AS groups,
          (SELECT count(*) FROM (SELECT DISTINCT organization_id, ended_at / 3600000, key_id, model FROM usage_ledger) AS distinct_groups) AS expected_groups,
          (SELECT count(*) FROM usage_hours h WHERE (h.prompt_tokens, h.completion_tokens) <>
            (SELECT sum(prompt_tokens), sum(completion_tokens) FROM usage_ledger l
              WHERE l.organization_id = h.organization_id AND l.ended_at / 3600000 = h.hour AND l.key_id = h.key_id AND l.model = h.model)) AS hours_unlike_rows,
          (SELECT sum(prompt_tokens) FROM usage_key_months) AS month_prompt, (SELECT sum(prompt_tokens) FROM usage_ledger) AS rows_prompt,
          (SELECT sum(completion_tokens) FROM usage_key_months) AS month_completion, (SELECT sum(completion_tokens) FROM usage_ledger) AS rows_completion`;
      expect(Number(sums.hours)).toBe(Number(sums.rows));
      // Migration 0007 fills the prompt and completion tokens of each hour and month.
      expect(Number(sums.hours_unlike_rows)).toBe(0);
      expect([Number(sums.month_prompt), Number(sums.month_completion)]).toEqual([Number(sums.rows_prompt), Number(sums.rows_completion)]);
      expect(Number(sums.rows_prompt)).toBeGreaterThan(0);
      expect(Number(sums.key_months)).toBe(Number(sums.rows));
      expect(Number(sums.groups)).toBe(Number(sums.expected_groups));
    } finally {
      await older.close();
    }
  } finally {
    await client.close();
  }
});

/**
 * A PostgresLedger on a client of its own that counts its statements: "touch" for last-use updates, otherwise the
 * number of rows committed. Its first commit waits until `releaseFirst` is called.
 */
function heldLedger() {
  const client = new Bun.SQL(databaseUrl, { max: 4 });
  let releaseFirst: () => void = () => {};
  const firstHeld = new Promise<void>((resolve) => (releaseFirst = resolve));
  const statements: (number | "touch")[] = [];
  const counts = { running: 0, mostRunning: 0 };
  const counting = (async (strings: TemplateStringsArray, ...values: unknown[]) => {
    const commit = strings.join("").includes("INSERT INTO usage_ledger");
    const first = commit && !statements.some((kind) => kind !== "touch");
    statements.push(commit ? (JSON.parse(values.find((value) => typeof value === "string") as string) as unknown[]).length : "touch");
    if (commit) counts.mostRunning = Math.max(counts.mostRunning, ++counts.running);
    try {
      if (first) await firstHeld;
      return await client(strings, ...values);
    } finally {
      if (commit) counts.running--;
    }
  }) as unknown as Bun.SQL;
  return {
    ledger: new PostgresLedger(counting),
    statements,
    counts,
    releaseFirst: () => releaseFirst(),
    /** The organization's rows in the ledger and its tokens in the month's aggregate. */
    async stored(organizationId: string): Promise<[number, number]> {
      const [row] = await client`SELECT count(*) AS rows, (SELECT tokens FROM usage_months WHERE organization_id = ${organizationId}) AS tokens
        FROM usage_ledger WHERE organization_id = ${organizationId}`;
      return [Number(row.rows), Number(row.tokens)];
    },
    async close(): Promise<void> {
      releaseFirst();
      await client.close();
    },
  };
}

/** A completed request's row of organization `organizationId`, 15 tokens. */
function batchRow(organizationId: string, index: number, now: number) {
  return ledgerRow({ requestId: `req_${organizationId}_${index}`, organizationId, keyId: "key_batches", startedAt: now, endedAt: now });
}

test("the ledger commits one batch at a time: rows recorded while a commit runs share the next, and last-use times do not wait behind it", async () => {
  const { ledger, statements, counts, releaseFirst, stored, close } = heldLedger();
  const now = Date.now();
  const row = (index: number) => batchRow("org_batches", index, now);
  try {
    const recorded = [ledger.record(row(0))];
    while (statements.length === 0) await Bun.sleep(1);
    // Five rows, each in a turn of its own, while the first commit is held.
    for (let index = 1; index <= 5; index++) {
      recorded.push(ledger.record(row(index)));
      await Bun.sleep(1);
    }
    ledger.touchKeys([["key_batches", now]]);
    await Bun.sleep(20);
    expect(statements).toEqual([1, "touch"]);
    releaseFirst();
    await Promise.all(recorded);
    await ledger.close();
    expect(statements).toEqual([1, "touch", 5]);
    expect(counts.mostRunning).toBe(1);
    expect(await stored("org_batches")).toEqual([6, 90]);
  } finally {
    await close();
  }
});

test("a backlog of rows goes in commits of at most a thousand, one after the other, every row counted once", async () => {
  const { ledger, statements, counts, releaseFirst, stored, close } = heldLedger();
  const now = Date.now();
  try {
    const recorded = [ledger.record(batchRow("org_backlog", 0, now))];
    while (statements.length === 0) await Bun.sleep(1);
    // 2,500 rows arrive while the first commit is held: the database is slow.
    for (let index = 1; index <= 2500; index++) recorded.push(ledger.record(batchRow("org_backlog", index, now)));
    releaseFirst();
    await Promise.all(recorded);
    await ledger.close();
    expect(statements).toEqual([1, maxRowsPerCommit, maxRowsPerCommit, 500]);
    expect(counts.mostRunning).toBe(1);
    expect(await stored("org_backlog")).toEqual([2501, 2501 * 15]);
  } finally {
    await close();
  }
});

test("sign-in failures: counted in one window, restarted after it, cleared", async () => {
  await storage.accounts.addFailure("a@example.com", 1000, 0);
  await storage.accounts.addFailure("a@example.com", 2000, 0);
  expect(await storage.accounts.failures("a@example.com")).toEqual({ count: 2, since: 1000 });
  await storage.accounts.addFailure("a@example.com", 5000, 1500);
  expect(await storage.accounts.failures("a@example.com")).toEqual({ count: 1, since: 5000 });
  await storage.accounts.clearFailures("a@example.com");
  expect(await storage.accounts.failures("a@example.com")).toBeUndefined();
});

test("console tokens: listed without their hash, newest first; found by hash until revoked or expired; the same on SQLite", async () => {
  const directory = temporaryDirectory();
  const database = openDatabase(join(directory.path, "tokens.db"));
  const backends: [string, Storage][] = [
    ["postgres", storage],
    ["sqlite", sqliteStorage(database)],
  ];
  try {
    for (const [name, backend] of backends) {
      await backend.organizations.insert({ id: "org_tokens", name: "tokens", plan: "default", status: "active", createdAt: 1 });
      await backend.accounts.insertUser({ id: "usr_t", email: "t@example.com", passwordHash: "x", role: "member", organizationId: "org_tokens", createdAt: 1 });
      const token = (id: string, createdAt: number, expiresAt: number | null) => ({
        id,
        userId: "usr_t",
        name: id,
        tokenHash: `hash_${id}`,
        prefix: "sluice-console-ab",
        createdAt,
        expiresAt,
        revokedAt: null,
        lastUsedAt: null,
      });
      await backend.accounts.insertToken(token("tok_old", 10, null));
      await backend.accounts.insertToken(token("tok_new", 20, 1000));
      const listed = await backend.accounts.listTokens("usr_t");
      expect({ name, ids: listed.map((entry) => entry.id) }).toEqual({ name, ids: ["tok_new", "tok_old"] });
      expect(listed[0]).toEqual({
        id: "tok_new",
        userId: "usr_t",
        name: "tok_new",
        prefix: "sluice-console-ab",
        createdAt: 20,
        expiresAt: 1000,
        revokedAt: null,
        lastUsedAt: null,
        email: "t@example.com",
      });
      expect((await backend.accounts.listTokens()).length).toBe(2);
      expect(await backend.accounts.listTokens("usr_nobody")).toEqual([]);
      const user = { tokenId: "tok_new", tokenName: "tok_new", userId: "usr_t", email: "t@example.com", role: "member" as const, organizationId: "org_tokens" };
      expect({ name, user: await backend.accounts.tokenUser("hash_tok_new", 999) }).toEqual({ name, user });
      // Expired at 1000; a revoked one is gone at once, and a second revocation keeps the first time.
      expect(await backend.accounts.tokenUser("hash_tok_new", 1000)).toBeUndefined();
      expect(await backend.accounts.tokenUser("hash_tok_old", 5000)).toMatchObject({ tokenName: "tok_old" });
      await backend.accounts.revokeToken("tok_old", 6000);
      await backend.accounts.revokeToken("tok_old", 7000);
      expect(await backend.accounts.tokenUser("hash_tok_old", 6000)).toBeUndefined();
      expect((await backend.accounts.findToken("tok_old"))?.revokedAt).toBe(6000);
      // A use moves the last use forward, never back.
      await backend.accounts.touchToken("tok_new", 500);
      await backend.accounts.touchToken("tok_new", 400);
      expect((await backend.accounts.findToken("tok_new"))?.lastUsedAt).toBe(500);
      await backend.accounts.touchToken("tok_new", 900);
      expect((await backend.accounts.findToken("tok_new"))?.lastUsedAt).toBe(900);
      expect(await backend.accounts.findToken("tok_nothing")).toBeUndefined();
    }
  } finally {
    database.close();
    directory.remove();
  }
});

test("the same organization created twenty times at once: one row; the others are told the name is taken, not a database error", async () => {
  const organizations = new OrganizationService(storage.organizations, new Set(["default"]), new AuditLog(storage.audit));
  const results = await Promise.allSettled(Array.from({ length: 20 }, () => organizations.create({ name: "racing" }, { kind: "cli", name: "test" })));
  expect(results.filter((result) => result.status === "fulfilled").length).toBe(1);
  for (const result of results) {
    if (result.status === "rejected") {
      expect(result.reason).toBeInstanceOf(OrganizationExistsError);
      expect((result.reason as Error).message).toBe('organization "racing" already exists');
    }
  }
  expect((await storage.organizations.list()).filter((organization) => organization.name === "racing").length).toBe(1);
});

test("a key's expiry set and cleared (a rotation's grace)", async () => {
  await storage.organizations.insert({ id: "org_expiry", name: "expiry", plan: "default", status: "active", createdAt: 1 });
  await insertKey("key_expiry", "org_expiry", "rotating", "h_expiry");
  await storage.keys.setExpiry("key_expiry", 5000);
  expect((await storage.keys.find("key_expiry"))?.expiresAt).toBe(5000);
  await storage.keys.setExpiry("key_expiry", null);
  expect((await storage.keys.find("key_expiry"))?.expiresAt).toBeNull();
});

test("a usage report: tokens by organization and model or key over whole hours, organizations by name whatever their case", async () => {
  const ledger = storage.openLedger();
  await storage.organizations.insert({ id: "org_report_b", name: "Beta report", plan: "default", status: "active", createdAt: 1 });
  await storage.organizations.insert({ id: "org_report_a", name: "alpha report", plan: "default", status: "active", createdAt: 1 });
  await insertKey("key_report_a", "org_report_a", "ci", "h_report_a");
  const start = Date.UTC(2030, 0, 1);
  // Each row's completion tokens are a tenth of its prompt's, and half its prompt was cached: a report sums each kind.
  const kinds = (promptTokens: number) => ({
    tokens: promptTokens + promptTokens / 10,
    promptTokens,
    completionTokens: promptTokens / 10,
    cachedTokens: promptTokens / 2,
  });
  const rows: [string, string, string, number, number][] = [
    // organization, key, model, prompt tokens, hours after the start
    ["org_report_b", "key_report_b", "m", 100, 0],
    ["org_report_a", "key_report_a", "m", 10, 1],
    ["org_report_a", "key_report_a", "n", 40, 2],
    ["org_report_a", "key_report_x", "m", 30, 3],
    // The next month: outside a January report.
    ["org_report_a", "key_report_a", "m", 1000, 24 * 31],
  ];
  await Promise.all(
    rows.map(([organizationId, keyId, model, promptTokens, hours], index) =>
      ledger.record({
        requestId: `req_report_${index}`,
        organizationId,
        keyId,
        model,
        promptTokens,
        completionTokens: promptTokens / 10,
        reasoningTokens: 0,
        cachedTokens: promptTokens / 2,
        outcome: "completed",
        errorCode: null,
        ruleId: null,
        usageSource: "upstream",
        startedAt: start + hours * 3_600_000,
        endedAt: start + hours * 3_600_000,
        firstTokenMs: null,
      }),
    ),
  );
  await ledger.flush();
  const january = { firstHour: start / 3_600_000, endHour: Date.UTC(2030, 1, 1) / 3_600_000 };
  expect(await storage.usage.report({ ...january, by: "model" })).toEqual([
    { organizationId: "org_report_a", organization: "alpha report", group: "m", keyId: null, ...kinds(40) },
    { organizationId: "org_report_a", organization: "alpha report", group: "n", keyId: null, ...kinds(40) },
    { organizationId: "org_report_b", organization: "Beta report", group: "m", keyId: null, ...kinds(100) },
  ]);
  expect(await storage.usage.report({ ...january, by: "key", organizationId: "org_report_a" })).toEqual([
    { organizationId: "org_report_a", organization: "alpha report", group: "ci", keyId: "key_report_a", ...kinds(50) },
    // A key the database no longer knows is named by its id.
    { organizationId: "org_report_a", organization: "alpha report", group: "key_report_x", keyId: "key_report_x", ...kinds(30) },
  ]);
  // The month read from usage_key_months answers as its hours do.
  expect(await storage.usage.report({ ...january, month: monthOf(start), by: "model" })).toEqual(await storage.usage.report({ ...january, by: "model" }));
  expect(await storage.usage.report({ ...january, month: monthOf(start), by: "key" })).toEqual(await storage.usage.report({ ...january, by: "key" }));
  // Hours 1 and 2 only; the most tokens first.
  expect(await storage.usage.report({ firstHour: january.firstHour + 1, endHour: january.firstHour + 3, by: "model" })).toEqual([
    { organizationId: "org_report_a", organization: "alpha report", group: "n", keyId: null, ...kinds(40) },
    { organizationId: "org_report_a", organization: "alpha report", group: "m", keyId: null, ...kinds(10) },
  ]);
  await ledger.close();
});

test("the retention's delete: the oldest rows that ended before the time, at most the limit a call; two instances at once delete each row once", async () => {
  const ledger = storage.openLedger();
  await storage.organizations.insert({ id: "org_retention", name: "retention", plan: "default", status: "active", createdAt: 1 });
  // Long before any other test's rows: ended at 1,000,000 ms and after.
  const old = Array.from({ length: 1500 }, (_, index) => ({ ...batchRow("org_retention", index, 1_000_000 + index), requestId: `req_retention_${index}` }));
  const newer = Array.from({ length: 10 }, (_, index) => ({
    ...batchRow("org_retention", index, 1_000_000 + 5000 + index),
    requestId: `req_retention_new_${index}`,
  }));
  await Promise.all([...old, ...newer].map((row) => ledger.record(row)));
  await ledger.close();
  const cutoff = 1_000_000 + 1500;
  const remaining = async () =>
    (await storage.requestLog.page({ organizationId: "org_retention", limit: 2000 })).map((row) => row.requestId).sort((a, b) => a.localeCompare(b));

  expect(await storage.requestLog.deleteBefore(cutoff, 500)).toBe(500);
  // The oldest went first.
  const left = await remaining();
  expect(left.length).toBe(1010);
  expect(left).not.toContain("req_retention_499");
  expect(left).toContain("req_retention_500");

  const other = await postgresStorage(databaseUrl, quiet);
  try {
    const deleteAll = async (repository: Storage) => {
      let total = 0;
      for (let deleted = -1; deleted !== 0; total += deleted) deleted = await repository.requestLog.deleteBefore(cutoff, 100);
      return total;
    };
    const [here, there] = await Promise.all([deleteAll(storage), deleteAll(other)]);
    expect(here + there).toBe(1000);
  } finally {
    await other.close();
  }
  expect(await remaining()).toEqual(newer.map((row) => row.requestId).sort((a, b) => a.localeCompare(b)));
});

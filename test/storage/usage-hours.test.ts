// usage_hours on SQLite: the console's chart and a capped key's month read it instead of the ledger's rows, and must
// answer exactly what the rows say, whether a row is still staged or moved, recorded twice, or before a reset.
import { Database } from "bun:sqlite";
import { afterEach, expect, test } from "bun:test";
import { join } from "node:path";
import { openDatabase, type DatabaseHandle } from "../../src/db/client";
import { migrate } from "../../src/db/migrate";
import { embeddedMigrations } from "../../src/db/migrations";
import type { LedgerRow } from "../../src/ledger/ledger";
import { moveStagedRows } from "../../src/ledger/inbox";
import { sqliteStorage } from "../../src/storage/sqlite";
import { hourMs, monthOf, startOfMonth } from "../../src/usage-periods";
import { stageRows, temporaryDirectory } from "../helpers";

// Mid-afternoon of the 26th: the month holds 25 days of history before today.
const now = Date.UTC(2026, 10, 26, 15, 40);
const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});

function setup(): DatabaseHandle {
  const directory = temporaryDirectory();
  const database = openDatabase(join(directory.path, "sluice.db"));
  database.sqlite.run(
    "INSERT INTO organizations (id, name, plan, status, created_at) VALUES ('org_a', 'acme', 'default', 'active', 1), ('org_b', 'other', 'default', 'active', 1)",
  );
  for (const [id, organizationId, name] of [
    ["key_a", "org_a", "laptop"],
    ["key_b", "org_a", "ci"],
    ["key_c", "org_b", "server"],
  ] as const)
    database.sqlite.run("INSERT INTO api_keys (id, organization_id, name, prefix, hash, created_at) VALUES (?, ?, ?, 'sk-sluice-x', ?, 1)", [
      id,
      organizationId,
      name,
      `hash_${id}`,
    ]);
  cleanups.push(() => {
    database.close();
    directory.remove();
  });
  return database;
}

let counter = 0;
function row(organizationId: string, keyId: string, model: string, endedAt: number, tokens: number): LedgerRow {
  return {
    requestId: `req_hours${String(++counter).padStart(8, "0")}`,
    organizationId,
    keyId,
    model,
    promptTokens: tokens - Math.floor(tokens / 3),
    completionTokens: Math.floor(tokens / 3),
    reasoningTokens: 0,
    cachedTokens: Math.floor((tokens - Math.floor(tokens / 3)) / 4),
    outcome: "completed",
    errorCode: null,
    ruleId: null,
    usageSource: "upstream",
    startedAt: endedAt - 500,
    endedAt,
    firstTokenMs: null,
  };
}

/** A deterministic spread of rows over the month: three keys, two models, every few minutes, some hours dense. */
function monthOfRows(): LedgerRow[] {
  const rows: LedgerRow[] = [];
  let seed = 7;
  const next = () => {
    seed = (seed * 1_103_515_245 + 12_345) % 2_147_483_648;
    return seed / 2_147_483_648;
  };
  for (let time = startOfMonth(now) - 3 * hourMs; time < now; time += Math.floor(next() * 40 * 60_000)) {
    const [organizationId, keyId] = next() < 0.7 ? ["org_a", next() < 0.6 ? "key_a" : "key_b"] : ["org_b", "key_c"];
    rows.push(row(organizationId, keyId, next() < 0.8 ? "m" : "large", time, 1 + Math.floor(next() * 500)));
  }
  return rows;
}

/** What the ledger's rows (moved and staged) say, summed the slow way. */
function fromRows(database: DatabaseHandle, sql: string, ...parameters: (string | number)[]): number {
  const union = "(SELECT * FROM usage_ledger UNION ALL SELECT * FROM usage_ledger_inbox)";
  return database.sqlite.query<{ value: number | null }, (string | number)[]>(sql.replace("LEDGER", union)).get(...parameters)?.value ?? 0;
}

test("the chart and a key's month read usage_hours and answer what the rows say, moved or staged; a replayed row counts once", async () => {
  const database = setup();
  const storage = sqliteStorage(database);
  const rows = monthOfRows();
  expect(rows.length).toBeGreaterThan(500);
  // Most rows moved; the last 40 still staged, as the server leaves them between the writer's moves.
  stageRows(database.sqlite, rows.slice(0, -40));
  moveStagedRows(database.sqlite);
  stageRows(database.sqlite, rows.slice(-40));

  const since = (Math.floor(now / hourMs) - 23) * hourMs;
  const chart = await storage.usage.hourly("org_a", since);
  const direct = database.sqlite
    .query<{ hour: number; model: string; keyName: string; tokens: number }, [number]>(
      `SELECT ended_at / ${hourMs} AS hour, model, CASE key_id WHEN 'key_a' THEN 'laptop' ELSE 'ci' END AS keyName, sum(prompt_tokens + completion_tokens) AS tokens
         FROM (SELECT * FROM usage_ledger UNION ALL SELECT * FROM usage_ledger_inbox) WHERE organization_id = 'org_a' AND ended_at >= ? GROUP BY 1, 2, 3`,
    )
    .all(since);
  const order = (left: { hour: number; model: string; keyName: string }, right: typeof left) =>
    left.hour - right.hour || left.model.localeCompare(right.model) || left.keyName.localeCompare(right.keyName);
  expect(direct.length).toBeGreaterThan(10);
  expect([...chart].sort(order)).toEqual(direct.sort(order));

  for (const keyId of ["key_a", "key_b", "key_c"]) {
    const expected = fromRows(
      database,
      "SELECT sum(prompt_tokens + completion_tokens) AS value FROM LEDGER WHERE key_id = ? AND ended_at >= ?",
      keyId,
      startOfMonth(now),
    );
    expect(expected).toBeGreaterThan(0);
    expect((await storage.usage.keyUsage(keyId, now)).monthTokens).toBe(expected);
  }

  // Everything moved, with a replay of a moved row and of a staged one: usage_hours holds every row once.
  stageRows(database.sqlite, [rows[10] as LedgerRow, rows.at(-1) as LedgerRow]);
  moveStagedRows(database.sqlite);
  moveStagedRows(database.sqlite);
  const hours = database.sqlite.query<{ value: number }, []>("SELECT sum(tokens) AS value FROM usage_hours").get()?.value;
  expect(hours).toBe(rows.reduce((sum, entry) => sum + entry.promptTokens + entry.completionTokens, 0));
  // Each hour's and month's prompt, completion and cached tokens, whether their rows were moved together or replayed.
  const byKind = (table: string, period: string) =>
    database.sqlite
      .query<Record<string, number | string>, []>(
        `SELECT organization_id, ${period} AS period, key_id, model, tokens, prompt_tokens, completion_tokens, cached_tokens FROM ${table} ORDER BY 1, 2, 3, 4`,
      )
      .all();
  const fromLedger = (period: string) =>
    database.sqlite
      .query<Record<string, number | string>, []>(
        `SELECT organization_id, ${period} AS period, key_id, model, sum(prompt_tokens + completion_tokens) AS tokens, sum(prompt_tokens) AS prompt_tokens,
                sum(completion_tokens) AS completion_tokens, sum(cached_tokens) AS cached_tokens
           FROM usage_ledger GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4`,
      )
      .all();
  expect(byKind("usage_hours", "hour")).toEqual(fromLedger(`ended_at / ${hourMs}`));
  const monthSql = "CAST(strftime('%Y', ended_at / 1000, 'unixepoch') AS INTEGER) * 12 + CAST(strftime('%m', ended_at / 1000, 'unixepoch') AS INTEGER) - 1";
  expect(byKind("usage_key_months", "month")).toEqual(fromLedger(monthSql));
  expect(rows.some((entry) => entry.cachedTokens > 0)).toBe(true);
});

test("after a reset in the middle of an hour, a key's month counts only what ended after it; the chart still shows the day", async () => {
  const database = setup();
  const storage = sqliteStorage(database);
  const rows = monthOfRows();
  stageRows(database.sqlite, rows);
  moveStagedRows(database.sqlite);
  const resetAt = now - 5 * hourMs - 17 * 60_000;
  await storage.usage.reset("org_a", resetAt);
  // Rows after the reset: some in its own hour, some staged.
  stageRows(database.sqlite, [row("org_a", "key_a", "m", resetAt + 60_000, 100), row("org_a", "key_a", "m", resetAt - 60_000, 1000)]);
  moveStagedRows(database.sqlite);
  stageRows(database.sqlite, [row("org_a", "key_a", "large", now - 1000, 10)]);
  for (const keyId of ["key_a", "key_b"]) {
    const expected = fromRows(database, "SELECT sum(prompt_tokens + completion_tokens) AS value FROM LEDGER WHERE key_id = ? AND ended_at > ?", keyId, resetAt);
    expect((await storage.usage.keyUsage(keyId, now)).monthTokens).toBe(expected);
  }
  // Organization B's keys are untouched by A's reset.
  expect((await storage.usage.keyUsage("key_c", now)).monthTokens).toBe(
    fromRows(database, "SELECT sum(prompt_tokens + completion_tokens) AS value FROM LEDGER WHERE key_id = 'key_c' AND ended_at >= ?", startOfMonth(now)),
  );
  // The chart is history, not quota: a reset does not hide what was used before it.
  const chartTokens = (await storage.usage.hourly("org_a", now - 23 * hourMs - (now % hourMs))).reduce((sum, entry) => sum + entry.tokens, 0);
  expect(chartTokens).toBe(
    fromRows(
      database,
      "SELECT sum(prompt_tokens + completion_tokens) AS value FROM LEDGER WHERE organization_id = 'org_a' AND ended_at >= ?",
      now - 23 * hourMs - (now % hourMs),
    ),
  );
});

test("the migrations fill usage_hours, then usage_key_months, from the rows a database already holds: tokens, prompt and completion", () => {
  const directory = temporaryDirectory();
  cleanups.push(() => directory.remove());
  const path = join(directory.path, "sluice.db");
  const older = new Database(path, { strict: true });
  migrate(
    older,
    embeddedMigrations.filter((migration) => migration.tag < "0010_usage_hours"),
  );
  const insert = older.query(
    `INSERT INTO usage_ledger (request_id, organization_id, key_id, model, prompt_tokens, completion_tokens, reasoning_tokens, outcome, usage_source, started_at, ended_at)
     VALUES (?, ?, ?, ?, ?, ?, 0, 'completed', 'upstream', ?, ?)`,
  );
  const rows = monthOfRows();
  for (const entry of rows)
    insert.run(entry.requestId, entry.organizationId, entry.keyId, entry.model, entry.promptTokens, entry.completionTokens, entry.startedAt, entry.endedAt);
  older.close();
  const upgraded = openDatabase(path);
  cleanups.push(() => upgraded.close());
  const byGroup = upgraded.sqlite
    .query<{ groups: number; tokens: number }, []>(
      `SELECT count(*) AS groups, sum(tokens) AS tokens FROM usage_hours h
        WHERE (tokens, prompt_tokens, completion_tokens, cached_tokens) =
              (SELECT sum(prompt_tokens + completion_tokens), sum(prompt_tokens), sum(completion_tokens), 0 FROM usage_ledger l
                WHERE l.organization_id = h.organization_id AND l.ended_at / ${hourMs} = h.hour AND l.key_id = h.key_id AND l.model = h.model)`,
    )
    .get();
  expect(byGroup?.tokens).toBe(rows.reduce((sum, entry) => sum + entry.promptTokens + entry.completionTokens, 0));
  expect(byGroup?.groups).toBe(upgraded.sqlite.query<{ value: number }, []>("SELECT count(*) AS value FROM usage_hours").get()?.value);
  // Each key's and model's month, as monthOf() numbers months.
  const expected = new Map<string, [number, number, number]>();
  for (const entry of rows) {
    const group = `${entry.organizationId} ${monthOf(entry.endedAt)} ${entry.keyId} ${entry.model}`;
    const [tokens, prompt, completion] = expected.get(group) ?? [0, 0, 0];
    expected.set(group, [tokens + entry.promptTokens + entry.completionTokens, prompt + entry.promptTokens, completion + entry.completionTokens]);
  }
  const months = upgraded.sqlite
    .query<{ group: string; tokens: number; prompt: number; completion: number }, []>(
      `SELECT organization_id || ' ' || month || ' ' || key_id || ' ' || model AS "group", tokens, prompt_tokens AS prompt, completion_tokens AS completion
         FROM usage_key_months`,
    )
    .all();
  expect(new Map(months.map((entry) => [entry.group, [entry.tokens, entry.prompt, entry.completion]]))).toEqual(expected);
});

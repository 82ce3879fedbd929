// The request log at a million ledger rows, on both backends: each page and each filter, timed through the same
// service the console and the CLI use (median of repeated runs), against the aim of 50 ms a page. Then the usage
// reads that must not grow with history: every organization's usage (what a start-up restores), one capped key's
// (restored at start-up from its ledger rows), and the console's 24-hour chart, with the rows spread over 30 days
// and with all of them in the last 24 hours (a busy day).
//   bun bench/request-log.ts [--rows 1000000] [--sqlite-only]
// Writes bench/results/request-log.json.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { openDatabase } from "../src/db/client";
import { RequestLogService, type RequestLogFilter } from "../src/modules/requests/service";
import { reportHours } from "../src/modules/usage/report";
import { postgresStorage } from "../src/storage/postgres";
import { sqliteStorage } from "../src/storage/sqlite";
import type { ChangeFeed, Storage } from "../src/storage/types";
import { startPostgres } from "../test/support/services";
import { bucketMs, hourMs } from "../src/usage-periods";
import { median } from "./statistics";

const { values } = parseArgs({ options: { rows: { type: "string", default: "1000000" }, "sqlite-only": { type: "boolean", default: false } } });
const rows = Number(values.rows);
const runs = 15;
const aimMs = 50;
const now = Date.now();
const monthSpanMs = 30 * 86_400_000;
const daySpanMs = 86_400_000;

function log(message: string): void {
  process.stderr.write(`[bench request-log] ${message}\n`);
}

/**
 * Row `index` of the synthetic ledger, written the same way by both backends: 20 organizations (one with half the
 * traffic), 200 keys and one with a quarter of the rows (in the big organization), five models (one with 0.1% of
 * the rows), 97% completed; ended_at ascending over the span (30 days, or the last 24 hours).
 */
const shape = {
  organization: "CASE WHEN i % 2 = 0 THEN 'org_big' ELSE 'org_' || (i % 19) END",
  key: "CASE WHEN i % 4 = 0 THEN 'key_big' ELSE 'key_' || (i % 200) END",
  model: "CASE WHEN i % 1000 = 7 THEN 'rare' ELSE 'model_' || (i % 4) END",
  outcome: "CASE WHEN i % 200 = 3 THEN 'content_filter' WHEN i % 200 = 5 THEN 'upstream_error' WHEN i % 50 = 9 THEN 'client_disconnected' ELSE 'completed' END",
};

/** The organizations the rows name (a usage report names each organization; the ledger has no foreign key). */
const organizationsSql = `INSERT INTO organizations (id, name, plan, status, created_at)
  SELECT DISTINCT organization_id, organization_id, 'default', 'active', 0 FROM usage_ledger`;

function endedAt(index: number): number {
  return now - monthSpanMs + Math.floor((index / rows) * monthSpanMs);
}

async function fillSqlite(path: string, spanMs: number): Promise<void> {
  const database = openDatabase(path);
  database.sqlite.run("CREATE TEMP TABLE numbers (i INTEGER)");
  const insertNumber = database.sqlite.query("INSERT INTO numbers (i) VALUES (?)");
  database.sqlite.transaction(() => {
    for (let index = 0; index < rows; index++) insertNumber.run(index);
  })();
  database.sqlite.run(
    `INSERT INTO usage_ledger (request_id, organization_id, key_id, model, prompt_tokens, completion_tokens, reasoning_tokens, outcome, usage_source, started_at, ended_at, first_token_ms)
     SELECT printf('req_%012d', i), ${shape.organization}, ${shape.key}, ${shape.model}, 12, 11, 6, ${shape.outcome}, 'upstream',
            ${now - spanMs} + (i * ${spanMs} / ${rows}) - 900, ${now - spanMs} + (i * ${spanMs} / ${rows}), 120
       FROM numbers`,
  );
  // The aggregates the writer keeps beside the rows (ledger/inbox.ts): minutes only as far back as a window needs;
  // months and hours (by key and model) for every row.
  database.sqlite.run(
    `INSERT INTO usage_minutes (organization_id, minute, tokens, last_time)
     SELECT organization_id, ended_at / ${bucketMs}, sum(prompt_tokens + completion_tokens), max(ended_at) FROM usage_ledger
      WHERE ended_at >= ${now - 6 * hourMs} GROUP BY 1, 2`,
  );
  database.sqlite.run(
    `INSERT INTO usage_months (organization_id, month, tokens)
     SELECT organization_id, CAST(strftime('%Y', ended_at / 1000, 'unixepoch') AS INTEGER) * 12 + CAST(strftime('%m', ended_at / 1000, 'unixepoch') AS INTEGER) - 1,
            sum(prompt_tokens + completion_tokens)
       FROM usage_ledger GROUP BY 1, 2`,
  );
  database.sqlite.run(
    `INSERT INTO usage_hours (organization_id, hour, key_id, model, tokens)
     SELECT organization_id, ended_at / ${hourMs}, key_id, model, sum(prompt_tokens + completion_tokens) FROM usage_ledger GROUP BY 1, 2, 3, 4`,
  );
  database.sqlite.run(
    `INSERT INTO usage_key_months (organization_id, month, key_id, model, tokens)
     SELECT organization_id, CAST(strftime('%Y', hour * 3600, 'unixepoch') AS INTEGER) * 12 + CAST(strftime('%m', hour * 3600, 'unixepoch') AS INTEGER) - 1,
            key_id, model, sum(tokens)
       FROM usage_hours GROUP BY 1, 2, 3, 4`,
  );
  database.sqlite.run(organizationsSql);
  database.close();
}

async function fillPostgres(url: string, spanMs: number): Promise<void> {
  const client = new Bun.SQL(url);
  await client.unsafe(
    `INSERT INTO usage_ledger (request_id, organization_id, key_id, model, prompt_tokens, completion_tokens, reasoning_tokens, outcome, usage_source, started_at, ended_at, first_token_ms)
     SELECT 'req_' || lpad(i::text, 12, '0'), ${shape.organization}, ${shape.key}, ${shape.model}, 12, 11, 6, ${shape.outcome}, 'upstream',
            ${now - spanMs}::bigint + (i::bigint * ${spanMs} / ${rows}) - 900, ${now - spanMs}::bigint + (i::bigint * ${spanMs} / ${rows}), 120
       FROM generate_series(0, ${rows - 1}) AS i`,
  );
  await client.unsafe(
    `INSERT INTO usage_minutes (organization_id, minute, tokens, last_time)
     SELECT organization_id, ended_at / ${bucketMs}, sum(prompt_tokens + completion_tokens), max(ended_at) FROM usage_ledger
      WHERE ended_at >= ${now - 6 * hourMs} GROUP BY 1, 2`,
  );
  await client.unsafe(
    `INSERT INTO usage_months (organization_id, month, tokens)
     SELECT organization_id, (extract(year FROM utc) * 12 + extract(month FROM utc) - 1)::bigint, sum(tokens)
       FROM (SELECT organization_id, prompt_tokens + completion_tokens AS tokens, to_timestamp(ended_at / 1000) AT TIME ZONE 'UTC' AS utc FROM usage_ledger) AS rows
      GROUP BY 1, 2`,
  );
  await client.unsafe(
    `INSERT INTO usage_hours (organization_id, hour, key_id, model, tokens)
     SELECT organization_id, ended_at / ${hourMs}, key_id, model, sum(prompt_tokens + completion_tokens) FROM usage_ledger GROUP BY 1, 2, 3, 4`,
  );
  await client.unsafe(
    `INSERT INTO usage_key_months (organization_id, month, key_id, model, tokens)
     SELECT organization_id, (extract(year FROM utc) * 12 + extract(month FROM utc) - 1)::bigint, key_id, model, sum(tokens)
       FROM (SELECT organization_id, key_id, model, tokens, to_timestamp(hour * 3600) AT TIME ZONE 'UTC' AS utc FROM usage_hours) AS hours
      GROUP BY 1, 2, 3, 4`,
  );
  await client.unsafe(organizationsSql);
  // What autovacuum does on its own after such a load; a fresh bulk load has no statistics until it runs.
  await client.unsafe("ANALYZE");
  await client.close();
}

const middle = { endedAt: endedAt(Math.floor(rows / 2)), requestId: "req_999999999999" };
const cases: [string, Omit<RequestLogFilter, "limit" | "after">, { cursorAtMiddle?: boolean }?][] = [
  ["newest page, every organization", {}],
  ["a page in the middle (cursor), every organization", {}, { cursorAtMiddle: true }],
  ["organization with half the rows", { organizationId: "org_big" }],
  ["organization with half the rows, page in the middle", { organizationId: "org_big" }, { cursorAtMiddle: true }],
  ["organization with 2.6% of the rows", { organizationId: "org_3" }],
  ["one key", { keyId: "key_17" }],
  ["popular model", { model: "model_2" }],
  ["rare model (0.1%)", { model: "rare" }],
  ["rare model in one organization", { organizationId: "org_big", model: "rare" }],
  ["outcome content_filter (0.5%)", { outcome: "content_filter" }],
  ["outcome completed", { outcome: "completed" }],
  ["organization + outcome upstream_error", { organizationId: "org_3", outcome: "upstream_error" }],
  ["last hour", { since: now - 3_600_000 }],
  ["one day, two weeks ago", { since: now - 15 * 86_400_000, until: now - 14 * 86_400_000 }],
  ["request id", { requestId: `req_${String(Math.floor(rows / 3)).padStart(12, "0")}` }],
  ["request id in another organization (member)", { organizationId: "org_3", requestId: `req_${String(Math.floor(rows / 3) + 1).padStart(12, "0")}` }],
];

/** Median milliseconds of `runs` calls of `read`, and how many rows its last call returned. */
async function timeRuns(read: () => Promise<number>): Promise<{ median_ms: number; rows: number }> {
  const samples: number[] = [];
  let count = 0;
  for (let run = 0; run < runs; run++) {
    const started = performance.now();
    count = await read();
    samples.push(performance.now() - started);
  }
  return { median_ms: Math.round(median(samples) * 100) / 100, rows: count };
}

/** The usage reads that a start-up and the console make, on a database filled over `span`. */
async function measureUsage(storage: Storage, span: string): Promise<Record<string, { median_ms: number; rows: number }>> {
  const since = (Math.floor(now / hourMs) - 23) * hourMs;
  const lastMonth = { firstHour: Math.floor((now - monthSpanMs) / hourMs), endHour: Math.ceil(now / hourMs) };
  const thisMonth = reportHours({}, now);
  const cases: [string, () => Promise<number>][] = [
    ["every organization's usage (a start-up's restore)", async () => (await storage.usage.read(now)).size],
    ["one organization's usage", async () => (await storage.usage.read(now, "org_big")).size],
    ["a capped key with a quarter of the rows (restored at start-up)", async () => (await storage.usage.keyUsage("key_big", now)).buckets.length],
    ["a capped key with 0.4% of the rows", async () => (await storage.usage.keyUsage("key_17", now)).buckets.length],
    ["the console's 24-hour chart, organization with half the rows", async () => (await storage.usage.hourly("org_big", since)).length],
    ["the console's 24-hour chart, organization with 2.6% of the rows", async () => (await storage.usage.hourly("org_3", since)).length],
    ["this month's usage report (the console's), every organization by model", async () => (await storage.usage.report({ ...thisMonth, by: "model" })).length],
    ["this month's usage report (the console's), every organization by key", async () => (await storage.usage.report({ ...thisMonth, by: "key" })).length],
    ["a usage report of the last 30 days' hours (the CLI's --since), by model", async () => (await storage.usage.report({ ...lastMonth, by: "model" })).length],
    ["a usage report of the last 30 days' hours (the CLI's --since), by key", async () => (await storage.usage.report({ ...lastMonth, by: "key" })).length],
  ];
  const results: Record<string, { median_ms: number; rows: number }> = {};
  for (const [name, read] of cases) {
    results[name] = await timeRuns(read);
    log(`${storage.kind}, ${span}: ${name}: ${results[name]?.median_ms} ms (${results[name]?.rows} rows)`);
  }
  return results;
}

async function measure(storage: Storage): Promise<Record<string, { median_ms: number; rows: number }>> {
  const service = new RequestLogService(storage.requestLog);
  const results: Record<string, { median_ms: number; rows: number }> = {};
  for (const [name, filter, options] of cases) {
    const cursor = options?.cursorAtMiddle ? Buffer.from(`${middle.endedAt}.${middle.requestId}`).toString("base64url") : undefined;
    results[name] = await timeRuns(async () => (await service.page(filter, { cursor, limit: 50 })).rows.length);
    log(`${storage.kind}: ${name}: ${results[name]?.median_ms} ms (${results[name]?.rows} rows)`);
  }
  const started = performance.now();
  let bytes = 0;
  for await (const chunk of service.csv({ organizationId: "org_3" })) bytes += chunk.length;
  const seconds = (performance.now() - started) / 1000;
  results["CSV export of an organization"] = { median_ms: Math.round(seconds * 1000), rows: Math.round(rows / 38) };
  log(`${storage.kind}: CSV of org_3: ${bytes} bytes in ${seconds.toFixed(2)} s`);
  return results;
}

const noChanges: ChangeFeed = { onChange() {}, check() {}, announce: async () => {} };
const work = mkdtempSync(join(tmpdir(), "sluice-bench-log-"));
const report: Record<string, unknown> = { rows, runs, aim_ms: aimMs, measured_at: new Date().toISOString() };
const spans = { "30 days": monthSpanMs, "the last 24 hours": daySpanMs };
const usage: Record<string, Record<string, unknown>> = { sqlite: {}, postgres: {} };
try {
  for (const [span, spanMs] of Object.entries(spans)) {
    log(`SQLite: filling ${rows} rows over ${span}`);
    const path = join(work, `log-${spanMs}.db`);
    await fillSqlite(path, spanMs);
    const sqlite = sqliteStorage(openDatabase(path));
    // The request log's pages are measured on the 30-day history, as before.
    if (spanMs === monthSpanMs) report.sqlite = await measure(sqlite);
    (usage.sqlite as Record<string, unknown>)[span] = await measureUsage(sqlite, span);
    await sqlite.close();
  }
  if (!values["sqlite-only"]) {
    const server = await startPostgres();
    try {
      for (const [span, spanMs] of Object.entries(spans)) {
        const url = await server.createDatabase(`request_log_${spanMs}`);
        const postgres = await postgresStorage(url, noChanges);
        log(`PostgreSQL: filling ${rows} rows over ${span}`);
        await fillPostgres(url, spanMs);
        if (spanMs === monthSpanMs) report.postgres = await measure(postgres);
        (usage.postgres as Record<string, unknown>)[span] = await measureUsage(postgres, span);
        await postgres.close();
      }
    } finally {
      server.stop();
    }
  }
  report.usage = usage;
} finally {
  rmSync(work, { recursive: true, force: true });
}
const pages = [report.sqlite, report.postgres].flatMap((backend) =>
  Object.entries((backend ?? {}) as Record<string, { median_ms: number }>).filter(([name]) => !name.startsWith("CSV")),
);
const worst = Math.max(...pages.map(([, result]) => result.median_ms));
report.worst_page_ms = worst;
await Bun.write(join(import.meta.dir, "results/request-log.json"), `${JSON.stringify(report, null, 2)}\n`);
console.log(`request log at ${rows} rows: worst page ${worst} ms (aim < ${aimMs} ms); bench/results/request-log.json`);

// The request log at a million ledger rows, on both backends: each page and each filter, timed through the same
// service the console and the CLI use (median of repeated runs), against the aim of 50 ms a page.
//   bun bench/request-log.ts [--rows 1000000] [--sqlite-only]
// Writes bench/results/request-log.json.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { openDatabase } from "../src/db/client";
import { RequestLogService, type RequestLogFilter } from "../src/modules/requests/service";
import { postgresStorage } from "../src/storage/postgres";
import { sqliteStorage } from "../src/storage/sqlite";
import type { ChangeFeed, Storage } from "../src/storage/types";
import { startPostgres } from "../test/support/services";
import { median } from "./statistics";

const { values } = parseArgs({ options: { rows: { type: "string", default: "1000000" }, "sqlite-only": { type: "boolean", default: false } } });
const rows = Number(values.rows);
const runs = 15;
const aimMs = 50;
const now = Date.now();
const spanMs = 30 * 86_400_000;

function log(message: string): void {
  process.stderr.write(`[bench request-log] ${message}\n`);
}

/**
 * Row `index` of the synthetic ledger, written the same way by both backends: 20 organizations (one with half the
 * traffic), 200 keys, five models (one with 0.1% of the rows), 97% completed; ended_at ascending over 30 days.
 */
const shape = {
  organization: "CASE WHEN i % 2 = 0 THEN 'org_big' ELSE 'org_' || (i % 19) END",
  key: "'key_' || (i % 200)",
  model: "CASE WHEN i % 1000 = 7 THEN 'rare' ELSE 'model_' || (i % 4) END",
  outcome: "CASE WHEN i % 200 = 3 THEN 'content_filter' WHEN i % 200 = 5 THEN 'upstream_error' WHEN i % 50 = 9 THEN 'client_disconnected' ELSE 'completed' END",
};

function endedAt(index: number): number {
  return now - spanMs + Math.floor((index / rows) * spanMs);
}

async function fillSqlite(path: string): Promise<void> {
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
  database.close();
}

async function fillPostgres(url: string): Promise<void> {
  const client = new Bun.SQL(url);
  await client.unsafe(
    `INSERT INTO usage_ledger (request_id, organization_id, key_id, model, prompt_tokens, completion_tokens, reasoning_tokens, outcome, usage_source, started_at, ended_at, first_token_ms)
     SELECT 'req_' || lpad(i::text, 12, '0'), ${shape.organization}, ${shape.key}, ${shape.model}, 12, 11, 6, ${shape.outcome}, 'upstream',
            ${now - spanMs}::bigint + (i::bigint * ${spanMs} / ${rows}) - 900, ${now - spanMs}::bigint + (i::bigint * ${spanMs} / ${rows}), 120
       FROM generate_series(0, ${rows - 1}) AS i`,
  );
  // What autovacuum does on its own after such a load; a fresh bulk load has no statistics until it runs.
  await client.unsafe("ANALYZE usage_ledger");
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

async function measure(storage: Storage): Promise<Record<string, { median_ms: number; rows: number }>> {
  const service = new RequestLogService(storage.requestLog);
  const results: Record<string, { median_ms: number; rows: number }> = {};
  for (const [name, filter, options] of cases) {
    const cursor = options?.cursorAtMiddle ? Buffer.from(`${middle.endedAt}.${middle.requestId}`).toString("base64url") : undefined;
    const samples: number[] = [];
    let count = 0;
    for (let run = 0; run < runs; run++) {
      const started = performance.now();
      const page = await service.page(filter, { cursor, limit: 50 });
      samples.push(performance.now() - started);
      count = page.rows.length;
    }
    results[name] = { median_ms: Math.round(median(samples) * 100) / 100, rows: count };
    log(`${storage.kind}: ${name}: ${results[name]?.median_ms} ms (${count} rows)`);
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
try {
  log(`SQLite: filling ${rows} rows`);
  const path = join(work, "log.db");
  await fillSqlite(path);
  const sqlite = sqliteStorage(openDatabase(path));
  report.sqlite = await measure(sqlite);
  await sqlite.close();
  if (!values["sqlite-only"]) {
    const server = await startPostgres();
    try {
      const url = await server.createDatabase("request_log");
      const postgres = await postgresStorage(url, noChanges);
      log(`PostgreSQL: filling ${rows} rows`);
      await fillPostgres(url);
      report.postgres = await measure(postgres);
      await postgres.close();
    } finally {
      server.stop();
    }
  }
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

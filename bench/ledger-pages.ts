// What one ledger commit writes: WAL frames (pages) per answered request through Sluice's own writer (LedgerWriter on
// the migrated schema), at the batch sizes the group commit sees (1 row a commit at light load, dozens when busy).
// A row is first staged (usage_ledger_inbox, what an answer waits for), then moved into usage_ledger and the
// aggregates (src/ledger/inbox.ts): both steps are measured, the move after every commit and every 256 rows, and
// the move with each of the ledger's secondary indexes dropped in turn, so that every index shows what it costs.
// Checkpoints are off while measuring, so the WAL's size counts every frame written.
// Usage: bun bench/ledger-pages.ts [ROWS=4000]   (`make bench` runs it; writes results/ledger-pages.json)
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { openDatabase } from "../src/db/client";
import { encodeRow, LedgerWriter, type LedgerValue } from "../src/ledger/ledger-writer";
import type { LedgerRow } from "../src/ledger/ledger";
import { timeOrderedId } from "../src/ids";

const rows = Number(process.argv[2] ?? 4000);
const batchSizes = [1, 8, 64];
const work = mkdtempSync(join(tmpdir(), "sluice-pages-"));

function ledgerIndexes(path: string): string[] {
  const handle = openDatabase(path);
  const names = handle.sqlite
    .query<{ name: string }, []>("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'usage_ledger' AND sql IS NOT NULL ORDER BY name")
    .all()
    .map((row) => row.name);
  handle.close();
  return names;
}

function row(index: number, now: number): LedgerRow {
  return {
    requestId: timeOrderedId("req_"),
    organizationId: `org_${index % 4}`,
    keyId: `key_${index % 16}`,
    model: index % 10 === 0 ? "small" : "large",
    promptTokens: 12,
    completionTokens: 11,
    reasoningTokens: 6,
    cachedTokens: 0,
    outcome: index % 50 === 0 ? "upstream_error" : "completed",
    errorCode: null,
    ruleId: null,
    usageSource: "upstream",
    startedAt: now - 5,
    endedAt: now,
    firstTokenMs: null,
  };
}

/**
 * Frames and CPU time per row for `rows` rows committed `batch` at a time, without the indexes in `dropped`, the
 * staged rows moved after every `moveEvery` rows (never while measuring when 0: the staging alone).
 */
function measure(batch: number, dropped: string[], moveEvery: number): { pagesPerRow: number; microsecondsPerRow: number } {
  const path = join(work, `ledger-${batch}-${moveEvery}-${dropped.join("-") || "all"}.db`);
  const handle = openDatabase(path);
  for (const name of dropped) handle.sqlite.run(`DROP INDEX ${name}`);
  handle.sqlite.run("PRAGMA wal_autocheckpoint = 0");
  const pageSize = handle.sqlite.query<{ page_size: number }, []>("PRAGMA page_size").get()?.page_size ?? 4096;
  const writer = new LedgerWriter(handle.sqlite);
  // A warm-up the size of one measured run, then a truncating checkpoint so the WAL starts empty.
  const commitRows = (count: number, start: number) => {
    for (let first = 0; first < count; first += batch) {
      const values: LedgerValue[] = [];
      const now = Date.now();
      for (let index = first; index < Math.min(count, first + batch); index++) encodeRow(row(start + index, now), values);
      writer.commit([values]);
      const committed = Math.min(count, first + batch);
      if (moveEvery > 0 && (committed % moveEvery === 0 || committed === count)) writer.move();
    }
  };
  commitRows(rows, 0);
  writer.move();
  handle.sqlite.run("PRAGMA wal_checkpoint(TRUNCATE)");
  const began = performance.now();
  commitRows(rows, rows);
  const elapsed = performance.now() - began;
  const frames = (statSync(`${path}-wal`).size - 32) / (pageSize + 24);
  handle.close();
  return { pagesPerRow: frames / rows, microsecondsPerRow: (elapsed * 1000) / rows };
}

try {
  const indexes = ledgerIndexes(join(work, "schema.db"));
  const result: Record<string, Record<string, { pagesPerRow: number; microsecondsPerRow: number }>> = {};
  for (const batch of batchSizes) {
    const entry: Record<string, { pagesPerRow: number; microsecondsPerRow: number }> = {};
    entry["staged (what an answer waits for)"] = measure(batch, [], 0);
    entry["staged and moved every commit"] = measure(batch, [], batch);
    entry["staged and moved every 256 rows"] = measure(batch, [], 256);
    for (const index of indexes) entry[`moved every commit, without ${index}`] = measure(batch, [index], batch);
    entry["moved every commit, without every secondary index"] = measure(batch, indexes, batch);
    result[`${batch} rows a commit`] = entry;
  }
  const output = join(import.meta.dir, "results", "ledger-pages.json");
  await Bun.write(output, `${JSON.stringify({ date: new Date().toISOString(), rows, indexes, result }, null, 2)}\n`);
  for (const [batch, entry] of Object.entries(result)) {
    console.log(batch);
    for (const [variant, figures] of Object.entries(entry)) {
      console.log(`  ${variant.padEnd(72)} ${figures.pagesPerRow.toFixed(2)} pages, ${figures.microsecondsPerRow.toFixed(1)} µs a row`);
    }
  }
  console.log(`Written to ${output}`);
} finally {
  rmSync(work, { recursive: true, force: true });
}

// The request log reads usage_ledger and the rows still staged in usage_ledger_inbox (src/ledger/inbox.ts), while
// the ledger's writer thread moves rows from one to the other: a page must see every row once, whenever a move lands.
import { afterAll, expect, test } from "bun:test";
import { join } from "node:path";
import { openDatabase } from "../../src/db/client";
import { sqliteStorage } from "../../src/storage/sqlite";
import { temporaryDirectory } from "../helpers";

const directory = temporaryDirectory();
afterAll(() => directory.remove());

const rows = 400;

// Another process moves the staged rows one per transaction, as fast as it can, as another connection would.
const mover = `
import { Database } from "bun:sqlite";
const sqlite = new Database(process.argv[1]);
sqlite.run("PRAGMA busy_timeout = 5000");
const columns = "request_id, organization_id, key_id, model, prompt_tokens, completion_tokens, reasoning_tokens, outcome, error_code, rule_id, usage_source, started_at, ended_at, first_token_ms";
const moveOne = sqlite.transaction(() => {
  const first = sqlite.query("SELECT min(rowid) AS id FROM usage_ledger_inbox").get().id;
  if (first === null) return false;
  sqlite.query("INSERT INTO usage_ledger (" + columns + ") SELECT " + columns + " FROM usage_ledger_inbox WHERE rowid = ?").run(first);
  sqlite.query("DELETE FROM usage_ledger_inbox WHERE rowid = ?").run(first);
  return true;
});
while (moveOne.immediate()) await Bun.sleep(0);
`;

test("a page sees every row exactly once while staged rows are being moved", async () => {
  const path = join(directory.path, "sluice.db");
  const database = openDatabase(path);
  const storage = sqliteStorage(database);
  database.sqlite.run("INSERT INTO organizations (id, name, plan, status, created_at) VALUES ('org_moves', 'moves', 'default', 'active', 0)");
  const stage = database.sqlite.query(
    `INSERT INTO usage_ledger_inbox (request_id, organization_id, key_id, model, prompt_tokens, completion_tokens, reasoning_tokens, outcome,
       usage_source, started_at, ended_at) VALUES (?, 'org_moves', 'key_x', 'm', 1, 1, 0, 'completed', 'upstream', ?, ?)`,
  );
  database.sqlite.transaction(() => {
    for (let index = 0; index < rows; index++) stage.run(`req_move${String(index).padStart(5, "0")}`, index, index);
  })();

  const child = Bun.spawn([process.execPath, "-e", mover, path], { stdout: "ignore", stderr: "inherit" });
  const wrongPages: number[] = [];
  let pages = 0;
  try {
    while (child.exitCode === null) {
      const page = await storage.requestLog.page({ organizationId: "org_moves", limit: rows + 1 });
      pages++;
      if (new Set(page.map((row) => row.requestId)).size !== rows || page.length !== rows) wrongPages.push(page.length);
      // A turn of the event loop, which notices the mover's exit.
      await Bun.sleep(0);
    }
  } finally {
    await child.exited;
  }
  expect(child.exitCode).toBe(0);
  // The mover ran while pages were read, and every row ended up moved.
  expect(pages).toBeGreaterThan(10);
  expect(database.sqlite.query("SELECT count(*) AS count FROM usage_ledger_inbox").get()).toEqual({ count: 0 });
  expect(wrongPages).toEqual([]);
  database.sqlite.close();
}, 60_000);

import { expect, test } from "bun:test";
import { join } from "node:path";
import { openDatabase } from "../../src/db/client";
import { Database } from "bun:sqlite";
import { DatabaseTooNewError, migrate } from "../../src/db/migrate";
import { embeddedMigrations, journalTags } from "../../src/db/migrations";
import { temporaryDirectory } from "../helpers";

test("every migration drizzle-kit generated is embedded in the build", () => {
  expect(embeddedMigrations.map((migration) => migration.tag)).toEqual(journalTags);
});

test("the database file is created on first start, in WAL mode, with every table; reopening applies nothing twice", () => {
  const directory = temporaryDirectory();
  const path = join(directory.path, "nested", "sluice.db");
  const first = openDatabase(path);
  expect(first.sqlite.query<{ journal_mode: string }, []>("PRAGMA journal_mode").get()?.journal_mode).toBe("wal");
  const tables = first.sqlite
    .query<{ name: string }, []>("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    .all()
    .map((row) => row.name);
  expect(tables).toEqual(expect.arrayContaining(["api_keys", "organizations", "usage_ledger", "sluice_migrations"]));
  first.close();
  const second = openDatabase(path);
  expect(second.sqlite.query<{ count: number }, []>("SELECT count(*) AS count FROM sluice_migrations").get()?.count).toBe(embeddedMigrations.length);
  second.close();
  directory.remove();
});

test("a database migrated by a newer Sluice is refused with a clear message", () => {
  const directory = temporaryDirectory();
  const path = join(directory.path, "sluice.db");
  const database = openDatabase(path);
  database.sqlite.run("INSERT INTO sluice_migrations (tag, applied_at) VALUES ('9999_future', 0)");
  database.close();
  expect(() => openDatabase(path)).toThrow(DatabaseTooNewError);
  expect(() => openDatabase(path)).toThrow("newer Sluice");
  directory.remove();
});

test("0020_quota_weights: the hours recorded before it count their tokens against a key's caps, as they were counted (weight 1)", () => {
  const database = new Database(":memory:");
  migrate(database, embeddedMigrations.slice(0, -1));
  database.run(
    "INSERT INTO usage_hours (organization_id, hour, key_id, model, tokens, prompt_tokens, completion_tokens) VALUES ('org_a', 1, 'key_a', 'm', 30, 10, 20)",
  );
  database.run(
    `INSERT INTO usage_ledger (request_id, organization_id, key_id, model, prompt_tokens, completion_tokens, reasoning_tokens, outcome, usage_source, started_at, ended_at)
     VALUES ('req_a', 'org_a', 'key_a', 'm', 10, 20, 0, 'completed', 'upstream', 1, 2)`,
  );
  migrate(database);
  expect(database.query("SELECT tokens, quota_tokens FROM usage_hours").all()).toEqual([{ tokens: 30, quota_tokens: 30 }]);
  // A ledger row's quota_tokens stays null: it counts its prompt and completion, as every read of the quotas takes it.
  expect(database.query("SELECT quota_tokens FROM usage_ledger").all()).toEqual([{ quota_tokens: null }]);
  database.close();
});

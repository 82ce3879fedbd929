import { expect, test } from "bun:test";
import { join } from "node:path";
import { openDatabase } from "../../src/db/client";
import { DatabaseTooNewError } from "../../src/db/migrate";
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

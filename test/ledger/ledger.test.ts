import { Database } from "bun:sqlite";
import { afterEach, expect, test } from "bun:test";
import { join } from "node:path";
import { openDatabase, type DatabaseHandle } from "../../src/db/client";
import { Ledger, type LedgerRow } from "../../src/ledger/ledger";
import { rowInDatabaseFile, temporaryDirectory } from "../helpers";

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});

function setup(): { database: DatabaseHandle; ledger: Ledger; path: string; reader: Database } {
  const directory = temporaryDirectory();
  const path = join(directory.path, "sluice.db");
  const database = openDatabase(path);
  const ledger = new Ledger(database.sqlite);
  // Another connection, as the CLI or a crash-restarted server would read it.
  const reader = new Database(path, { readonly: true });
  cleanups.push(() => {
    ledger.close();
    reader.close();
    database.close();
    directory.remove();
  });
  return { database, ledger, path, reader };
}

let counter = 0;
function row(overrides: Partial<LedgerRow> = {}): LedgerRow {
  const now = Date.now();
  return {
    requestId: `req_test${String(++counter).padStart(8, "0")}`,
    organizationId: "org_a",
    keyId: "key_a",
    model: "m",
    promptTokens: 10,
    completionTokens: 5,
    reasoningTokens: 2,
    outcome: "completed",
    errorCode: null,
    ruleId: null,
    usageSource: "upstream",
    startedAt: now,
    endedAt: now,
    firstTokenMs: null,
    ...overrides,
  };
}

const count = (reader: Database, sql: string) => (reader.query(sql).get() as { value: number }).value;

test("500 rows recorded at once: each promise resolves only when another connection can read its row, aggregates included", async () => {
  const { ledger, reader } = setup();
  const rows = Array.from({ length: 500 }, () => row());
  const seenAtResolve: boolean[] = [];
  const lookup = reader.query("SELECT 1 FROM usage_ledger WHERE request_id = ?");
  await Promise.all(rows.map((entry) => ledger.record(entry).then(() => seenAtResolve.push(lookup.get(entry.requestId) !== null))));
  expect(seenAtResolve).toHaveLength(500);
  expect(seenAtResolve.every(Boolean)).toBe(true);
  expect(count(reader, "SELECT count(*) AS value FROM usage_ledger")).toBe(500);
  expect(count(reader, "SELECT sum(tokens) AS value FROM usage_minutes")).toBe(500 * 15);
  expect(count(reader, "SELECT sum(tokens) AS value FROM usage_months")).toBe(500 * 15);
});

test("flush commits everything recorded so far before it returns", async () => {
  const { ledger, reader } = setup();
  const pending = [ledger.record(row()), ledger.record(row()), ledger.record(row())];
  ledger.flush();
  expect(count(reader, "SELECT count(*) AS value FROM usage_ledger")).toBe(3);
  await Promise.all(pending);
});

test("a commit that fails refuses its rows (never a silent loss); the next rows are written", async () => {
  const { database, ledger, reader } = setup();
  database.sqlite.run("CREATE TRIGGER poison BEFORE INSERT ON usage_ledger WHEN NEW.model = 'poison' BEGIN SELECT RAISE(ABORT, 'poisoned row'); END");
  const refused = ledger.record(row({ model: "poison" }));
  await expect(refused).rejects.toThrow("poisoned row");
  await ledger.record(row());
  expect(count(reader, "SELECT count(*) AS value FROM usage_ledger")).toBe(1);
});

test("a failing commit on the writer thread refuses its whole batch too; the next rows are written", async () => {
  const { database, ledger, reader } = setup();
  database.sqlite.run("CREATE TRIGGER poison BEFORE INSERT ON usage_ledger WHEN NEW.model = 'poison' BEGIN SELECT RAISE(ABORT, 'poisoned row'); END");
  // Ten rows in one turn make a busy batch, which the writer thread commits.
  const batch = [ledger.record(row({ model: "poison" })), ...Array.from({ length: 9 }, () => ledger.record(row()))];
  const settled = await Promise.allSettled(batch);
  expect(settled.every((result) => result.status === "rejected")).toBe(true);
  await ledger.record(row());
  expect(count(reader, "SELECT count(*) AS value FROM usage_ledger")).toBe(1);
});

test("quiet rows are committed on this thread, busy batches by the writer thread", async () => {
  const { database, ledger, reader } = setup();
  // data_version moves only when another connection commits.
  const version = () => (database.sqlite.query("PRAGMA data_version").get() as { data_version: number }).data_version;
  const before = version();
  for (let index = 0; index < 5; index++) await ledger.record(row());
  expect(version()).toBe(before);
  await Promise.all(Array.from({ length: 10 }, () => ledger.record(row())));
  expect(version()).not.toBe(before);
  expect(count(reader, "SELECT count(*) AS value FROM usage_ledger")).toBe(15);
});

test("a quiet row never stalls the event loop behind another process's lock: the writer thread waits for it instead", async () => {
  const { ledger, path, reader } = setup();
  // Another process (the CLI, say) in the middle of a write transaction.
  const holder = new Database(path);
  holder.run("BEGIN IMMEDIATE");
  holder.run("UPDATE change_counter SET version = version");
  let committed = false;
  const pending = ledger.record(row()).then(() => {
    committed = true;
  });
  const started = performance.now();
  await Bun.sleep(50);
  // Waiting on this thread would have held the timer back for the connection's whole busy_timeout (5 s).
  expect(performance.now() - started).toBeLessThan(2000);
  expect(committed).toBe(false);
  ledger.touchKeys([["key_a", 1]]);
  expect(performance.now() - started).toBeLessThan(2000);
  holder.run("COMMIT");
  holder.close();
  await pending;
  expect(count(reader, "SELECT count(*) AS value FROM usage_ledger")).toBe(1);
});

test("quiet rows still reach the database file: the writer thread takes a batch now and then and checkpoints", async () => {
  const { database, ledger, path } = setup();
  const version = () => (database.sqlite.query("PRAGMA data_version").get() as { data_version: number }).data_version;
  const first = row();
  await ledger.record(first);
  const before = version();
  for (let index = 0; index < 100; index++) await ledger.record(row());
  expect(version()).not.toBe(before);
  expect(rowInDatabaseFile(path, first.requestId)).toBe(true);
  // 101 one-row commits of ~9 pages: over 3.5 MB of WAL without checkpoints.
  expect(Bun.file(`${path}-wal`).size).toBeLessThan(2 * 1024 * 1024);
});

test("after close, rows are refused rather than left waiting", async () => {
  const { ledger } = setup();
  await ledger.record(row());
  ledger.close();
  await expect(ledger.record(row())).rejects.toThrow("closed");
});

test("an in-memory database is written on the server's thread", async () => {
  const database = openDatabase(":memory:");
  const ledger = new Ledger(database.sqlite);
  await ledger.record(row());
  expect((database.sqlite.query("SELECT count(*) AS value FROM usage_ledger").get() as { value: number }).value).toBe(1);
  ledger.close();
  database.close();
});

test("keys' last-used times: a few in quiet traffic on this thread, many on the writer thread", async () => {
  const { database, ledger, reader } = setup();
  database.sqlite.run("INSERT INTO organizations (id, name, plan, status, created_at) VALUES ('org_a', 'a', 'default', 'active', 0)");
  const keys = Array.from({ length: 20 }, (_, index) => `key_${index}`);
  for (const id of keys) {
    database.sqlite.run("INSERT INTO api_keys (id, organization_id, name, prefix, hash, created_at) VALUES (?, 'org_a', 'k', 'sk-sluice-ab', ?, 0)", [id, id]);
  }
  const version = () => (database.sqlite.query("PRAGMA data_version").get() as { data_version: number }).data_version;
  const before = version();
  ledger.touchKeys([["key_0", 1234]]);
  expect(count(reader, "SELECT last_used_at AS value FROM api_keys WHERE id = 'key_0'")).toBe(1234);
  expect(version()).toBe(before);
  ledger.touchKeys(keys.map((id): [string, number] => [id, 5678]));
  ledger.flush();
  expect(count(reader, "SELECT count(*) AS value FROM api_keys WHERE last_used_at = 5678")).toBe(20);
  expect(version()).not.toBe(before);
});

test("the writer checkpoints as it goes: committed rows reach the database file itself, and the WAL stays small", async () => {
  const { ledger, path } = setup();
  const first = row();
  await ledger.record(first);
  for (let batch = 0; batch < 200; batch++) await ledger.record(row());
  for (let batch = 0; batch < 20; batch++) await Promise.all(Array.from({ length: 50 }, () => ledger.record(row())));
  expect(rowInDatabaseFile(path, first.requestId)).toBe(true);
  // 1,200 rows, most of them one to a commit (~9 pages each): without checkpoints the WAL would pass 40 MB, while
  // passes every 250 pages start it again from its beginning.
  expect(Bun.file(`${path}-wal`).size).toBeLessThan(4 * 1024 * 1024);
});

test("a stop leaves no WAL to read back: the writer closes its connection, the ledger's last checkpoint truncates", async () => {
  const directory = temporaryDirectory();
  const path = join(directory.path, "sluice.db");
  const database = openDatabase(path);
  const ledger = new Ledger(database.sqlite);
  for (let batch = 0; batch < 10; batch++) await Promise.all(Array.from({ length: 100 }, () => ledger.record(row())));
  expect(Bun.file(`${path}-wal`).size).toBeGreaterThan(0);
  ledger.close();
  database.close();
  const wal = Bun.file(`${path}-wal`);
  expect((await wal.exists()) ? wal.size : 0).toBe(0);
  const reader = new Database(path, { readonly: true });
  expect(count(reader, "SELECT count(*) AS value FROM usage_ledger")).toBe(1000);
  reader.close();
  directory.remove();
});

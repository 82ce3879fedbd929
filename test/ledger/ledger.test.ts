import { Database } from "bun:sqlite";
import { afterEach, expect, test } from "bun:test";
import { join } from "node:path";
import { openDatabase, type DatabaseHandle } from "../../src/db/client";
import { moveStagedRows } from "../../src/ledger/inbox";
import { Ledger, type LedgerRow } from "../../src/ledger/ledger";
import { RowNotRecorded } from "../../src/ledger/not-recorded";
import { sqliteStorage } from "../../src/storage/sqlite";
import type { LedgerRefusalListener } from "../../src/storage/types";
import { committedRowSql, eventually, rowInDatabaseFile, stageRows, temporaryDirectory } from "../helpers";

const cleanups: (() => void)[] = [];
afterEach(() => {
  for (const cleanup of cleanups.splice(0)) cleanup();
});

function setup(onRefused?: LedgerRefusalListener): { database: DatabaseHandle; ledger: Ledger; path: string; reader: Database } {
  const directory = temporaryDirectory();
  const path = join(directory.path, "sluice.db");
  const database = openDatabase(path);
  const ledger = new Ledger(database.sqlite, onRefused);
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
    cachedTokens: 0,
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

/** data_version of the ledger's own staging connection: it moves when any other connection commits. */
function stagingVersion(ledger: Ledger): number {
  const staging = (ledger as unknown as { staging: Database }).staging;
  return (staging.query("PRAGMA data_version").get() as { data_version: number }).data_version;
}

/** Whether the ledger's writer thread is running (it starts when first needed). */
function writerStarted(ledger: Ledger): boolean {
  return (ledger as unknown as { worker: Worker | undefined }).worker !== undefined;
}

const count = (reader: Database, sql: string) => (reader.query(sql).get() as { value: number }).value;
/** Rows committed, whether still staged in the inbox or already moved (src/ledger/inbox.ts). */
const committedRows = (reader: Database) => count(reader, "SELECT (SELECT count(*) FROM usage_ledger) + (SELECT count(*) FROM usage_ledger_inbox) AS value");

/** A refused row's error: the request's 503 (its answer withheld), and the database's own error as its cause. */
async function refusal(recorded: Promise<void>): Promise<{ status: number; code: string; cause: string }> {
  const error = await recorded.then(
    () => {
      throw new Error("the row was recorded");
    },
    (refused: unknown) => refused,
  );
  expect(error).toBeInstanceOf(RowNotRecorded);
  const { status, code, cause } = error as RowNotRecorded;
  return { status, code, cause: String(cause) };
}

test("500 rows recorded at once: each promise resolves only when another connection can read its row; a flush moves them all, aggregates included", async () => {
  const { ledger, reader } = setup();
  const rows = Array.from({ length: 500 }, () => row());
  const seenAtResolve: boolean[] = [];
  const lookup = reader.query(committedRowSql);
  await Promise.all(rows.map((entry) => ledger.record(entry).then(() => seenAtResolve.push(lookup.get(entry.requestId) !== null))));
  expect(seenAtResolve).toHaveLength(500);
  expect(seenAtResolve.every(Boolean)).toBe(true);
  ledger.flush();
  expect(count(reader, "SELECT count(*) AS value FROM usage_ledger_inbox")).toBe(0);
  expect(count(reader, "SELECT count(*) AS value FROM usage_ledger")).toBe(500);
  expect(count(reader, "SELECT sum(tokens) AS value FROM usage_minutes")).toBe(500 * 15);
  expect(count(reader, "SELECT sum(tokens) AS value FROM usage_months")).toBe(500 * 15);
});

test("flush commits everything recorded so far before it returns", async () => {
  const { ledger, reader } = setup();
  const pending = [ledger.record(row()), ledger.record(row()), ledger.record(row())];
  ledger.flush();
  // Moved, not only staged: whoever flushes reads usage_ledger and the aggregates next.
  expect(count(reader, "SELECT count(*) AS value FROM usage_ledger")).toBe(3);
  expect(count(reader, "SELECT sum(tokens) AS value FROM usage_months")).toBe(3 * 15);
  await Promise.all(pending);
});

test("a commit that fails refuses its rows (never a silent loss); the next rows are written", async () => {
  const told: [string, number][] = [];
  const { database, ledger, reader } = setup((error, rows) => told.push([String(error), rows]));
  database.sqlite.run("CREATE TRIGGER poison BEFORE INSERT ON usage_ledger_inbox WHEN NEW.model = 'poison' BEGIN SELECT RAISE(ABORT, 'poisoned row'); END");
  const refused = await refusal(ledger.record(row({ model: "poison" })));
  expect(refused).toMatchObject({ status: 503, code: "server_overloaded" });
  expect(refused.cause).toContain("poisoned row");
  // Told once, with the database's error, for the log.
  expect(told).toEqual([[expect.stringContaining("poisoned row"), 1]]);
  await ledger.record(row());
  expect(committedRows(reader)).toBe(1);
});

test("a failing commit on the writer thread refuses its whole batch too; the next rows are written", async () => {
  const told: number[] = [];
  const { database, ledger, reader } = setup((_error, rows) => told.push(rows));
  database.sqlite.run("CREATE TRIGGER poison BEFORE INSERT ON usage_ledger_inbox WHEN NEW.model = 'poison' BEGIN SELECT RAISE(ABORT, 'poisoned row'); END");
  // A flush hands the turn's batch to the writer thread at once.
  const batch = [ledger.record(row({ model: "poison" })), ...Array.from({ length: 9 }, () => ledger.record(row()))];
  expect(() => ledger.flush()).not.toThrow();
  const settled = await Promise.allSettled(batch);
  expect(settled.every((result) => result.status === "rejected")).toBe(true);
  expect(told).toEqual([10]);
  await ledger.record(row());
  expect(committedRows(reader)).toBe(1);
});

test("a server with few requests holds no writer thread: their rows are moved, flushed and last-used times written on this thread", async () => {
  const { ledger, reader } = setup();
  const before = stagingVersion(ledger);
  const moved = () => count(reader, "SELECT count(*) AS value FROM usage_ledger");
  for (let index = 0; index < 3; index++) await ledger.record(row());
  await eventually(() => moved() === 3, 2000);
  expect(count(reader, "SELECT count(*) AS value FROM usage_ledger_inbox")).toBe(0);
  expect(count(reader, "SELECT sum(tokens) AS value FROM usage_minutes")).toBe(3 * 15);
  // A flush moves what is staged at once, on this thread too.
  for (let index = 0; index < 2; index++) await ledger.record(row());
  ledger.flush();
  expect(moved()).toBe(5);
  ledger.touchKeys([["key_a", 1]]);
  expect(writerStarted(ledger)).toBe(false);
  // No other connection committed anything: every write was the staging connection's own.
  expect(stagingVersion(ledger)).toBe(before);
});

test("load starts the writer thread: a move of more rows than this thread takes, or many commits at a light pace", async () => {
  const busy = setup();
  await Promise.all(Array.from({ length: 30 }, () => busy.ledger.record(row())));
  await eventually(() => count(busy.reader, "SELECT count(*) AS value FROM usage_ledger") === 30, 2000);
  expect(writerStarted(busy.ledger)).toBe(true);

  // One row every few milliseconds: each move here takes a few rows, but this thread never checkpoints, so after
  // 200 commits the writer starts and its passes copy the WAL back into the database file.
  const light = setup();
  const first = row();
  await light.ledger.record(first);
  for (let index = 0; index < 220 && !writerStarted(light.ledger); index++) {
    await light.ledger.record(row());
    await Bun.sleep(2);
  }
  expect(writerStarted(light.ledger)).toBe(true);
  await eventually(() => rowInDatabaseFile(light.path, first.requestId), 5000);
});

test("with no writer thread yet, a move that finds another process's lock goes to the writer, which waits for it", async () => {
  const { ledger, path, reader } = setup();
  await ledger.record(row());
  await ledger.record(row());
  const holder = new Database(path);
  holder.run("BEGIN IMMEDIATE");
  holder.run("UPDATE change_counter SET version = version");
  // The move is due 25 ms after the first row: it cannot run here, and the event loop does not wait.
  const started = performance.now();
  await eventually(() => writerStarted(ledger), 2000);
  expect(performance.now() - started).toBeLessThan(2000);
  holder.run("COMMIT");
  holder.close();
  await eventually(() => count(reader, "SELECT count(*) AS value FROM usage_ledger") === 2, 5000);
});

test("a stop with no writer thread also moves every row and leaves no WAL", async () => {
  const directory = temporaryDirectory();
  cleanups.push(() => directory.remove());
  const path = join(directory.path, "sluice.db");
  const database = openDatabase(path);
  const ledger = new Ledger(database.sqlite);
  for (let index = 0; index < 3; index++) await ledger.record(row());
  expect(Bun.file(`${path}-wal`).size).toBeGreaterThan(0);
  expect(writerStarted(ledger)).toBe(false);
  ledger.close();
  database.close();
  const wal = Bun.file(`${path}-wal`);
  expect((await wal.exists()) ? wal.size : 0).toBe(0);
  const reader = new Database(path, { readonly: true });
  expect(count(reader, "SELECT count(*) AS value FROM usage_ledger")).toBe(3);
  expect(count(reader, "SELECT count(*) AS value FROM usage_ledger_inbox")).toBe(0);
  reader.close();
});

test("rows are staged on this thread, one commit a turn, single rows and batches alike; the writer thread moves them", async () => {
  const { ledger, reader } = setup();
  // data_version moves only when another connection commits: the writer thread's, not the staging one.
  const version = () => stagingVersion(ledger);
  const before = version();
  for (let index = 0; index < 5; index++) await ledger.record(row());
  await Promise.all(Array.from({ length: 50 }, () => ledger.record(row())));
  expect(version()).toBe(before);
  expect(committedRows(reader)).toBe(55);
  // Within about 25 ms the writer thread, another connection, moves them.
  const deadline = performance.now() + 2000;
  while (count(reader, "SELECT count(*) AS value FROM usage_ledger") < 55 && performance.now() < deadline) await Bun.sleep(5);
  expect(version()).not.toBe(before);
  expect(count(reader, "SELECT count(*) AS value FROM usage_ledger_inbox")).toBe(0);
});

test("a thousand rows staged here make the writer move them at once; rows recorded meanwhile are committed too", async () => {
  const { ledger, reader } = setup();
  const version = () => stagingVersion(ledger);
  const before = version();
  await Promise.all(Array.from({ length: 1000 }, () => ledger.record(row())));
  expect(version()).toBe(before);
  // Recorded while the move is in flight, these go to the writer, which commits them after its move.
  await Promise.all(Array.from({ length: 10 }, () => ledger.record(row())));
  expect(version()).not.toBe(before);
  expect(count(reader, "SELECT count(*) AS value FROM usage_ledger")).toBeGreaterThanOrEqual(1000);
  expect(committedRows(reader)).toBe(1010);
});

test("rows recorded while a move is in flight wait for its reply and are staged here, never posted to the writer", async () => {
  const { ledger, path, reader } = setup();
  await Promise.all(Array.from({ length: 20 }, () => ledger.record(row())));
  await eventually(() => count(reader, "SELECT count(*) AS value FROM usage_ledger") === 20, 2000);
  const worker = (ledger as unknown as { worker: Worker }).worker;
  let postedRows = 0;
  const post = worker.postMessage.bind(worker);
  worker.postMessage = (message: { type: string; values?: unknown[] }) => {
    if (message.type === "rows" && (message.values?.length ?? 0) > 0) postedRows++;
    post(message);
  };
  for (let index = 0; index < 3; index++) await ledger.record(row());
  // Another process takes the lock before the move is asked (25 ms later): the writer's move waits for it.
  const holder = new Database(path);
  holder.run("BEGIN IMMEDIATE");
  holder.run("UPDATE change_counter SET version = version");
  await eventually(() => (ledger as unknown as { sent: unknown[] }).sent.length > 0, 2000);
  let committed = 0;
  const pending = Array.from({ length: 5 }, () => ledger.record(row()).then(() => committed++));
  await Bun.sleep(60);
  expect(committed).toBe(0);
  holder.run("COMMIT");
  holder.close();
  await Promise.all(pending);
  expect(postedRows).toBe(0);
  expect(committedRows(reader)).toBe(28);
  await eventually(() => count(reader, "SELECT count(*) AS value FROM usage_ledger") === 28, 2000);
});

test("a row never stalls the event loop behind another process's lock: the writer thread waits for it instead", async () => {
  const { database, ledger, path, reader } = setup();
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
  expect(committedRows(reader)).toBe(1);
  // The server's own connection still waits for a lock (its reads and the console's writes), as it was opened to.
  expect(database.sqlite.query<{ timeout: number }, []>("PRAGMA busy_timeout").get()?.timeout).toBe(5000);
});

test("rows staged here still reach the database file: the writer thread moves them and checkpoints", async () => {
  const { ledger, path } = setup();
  const first = row();
  await ledger.record(first);
  for (let index = 0; index < 100; index++) await ledger.record(row());
  // Asked about 100 ms after the first staged row.
  // A copy taken while the writer checkpoints can be torn and miss the row: only a check that sees it ends the wait.
  await eventually(() => rowInDatabaseFile(path, first.requestId), 2000);
  // 101 one-row commits stage about 0.8 MB of WAL, checkpointed or not: the next test is the one that bounds it.
  expect(Bun.file(`${path}-wal`).size).toBeLessThan(2 * 1024 * 1024);
});

test("after close, rows are refused rather than left waiting", async () => {
  const { ledger } = setup();
  await ledger.record(row());
  ledger.close();
  expect((await refusal(ledger.record(row()))).cause).toContain("closed");
  // Closed, not failed: nothing for readiness to report.
  expect(ledger.problem()).toBeUndefined();
});

test("an in-memory database is written on the server's thread", async () => {
  const database = openDatabase(":memory:");
  const ledger = new Ledger(database.sqlite);
  await ledger.record(row());
  expect((database.sqlite.query("SELECT count(*) AS value FROM usage_ledger").get() as { value: number }).value).toBe(1);
  ledger.close();
  database.close();
});

test("keys' last-used times: a few on this thread, many on the writer thread", async () => {
  const { database, ledger, reader } = setup();
  database.sqlite.run("INSERT INTO organizations (id, name, plan, status, created_at) VALUES ('org_a', 'a', 'default', 'active', 0)");
  const keys = Array.from({ length: 20 }, (_, index) => `key_${index}`);
  for (const id of keys) {
    database.sqlite.run("INSERT INTO api_keys (id, organization_id, name, prefix, hash, created_at) VALUES (?, 'org_a', 'k', 'sk-sluice-ab', ?, 0)", [id, id]);
  }
  const version = () => stagingVersion(ledger);
  const before = version();
  ledger.touchKeys([["key_0", 1234]]);
  expect(count(reader, "SELECT last_used_at AS value FROM api_keys WHERE id = 'key_0'")).toBe(1234);
  expect(version()).toBe(before);
  ledger.touchKeys(keys.map((id): [string, number] => [id, 5678]));
  ledger.flush();
  expect(count(reader, "SELECT count(*) AS value FROM api_keys WHERE last_used_at = 5678")).toBe(20);
  expect(version()).not.toBe(before);
});

test("the writer checkpoints as it goes: committed rows reach the database file itself, and the WAL stays bounded", async () => {
  const { ledger, path } = setup();
  const first = row();
  await ledger.record(first);
  let largestWal = 0;
  for (let batch = 0; batch < 12_000; batch++) {
    await ledger.record(row());
    if (batch % 100 === 0) largestWal = Math.max(largestWal, Bun.file(`${path}-wal`).size);
  }
  for (let batch = 0; batch < 20; batch++) await Promise.all(Array.from({ length: 50 }, () => ledger.record(row())));
  // With the ledger still open: the row is moved within 25 ms and copied by the pass after that move, but a busy
  // machine can delay both past the last record (a run of make test once asserted before they ran).
  // A copy taken while the writer checkpoints can be torn and miss the row: only a check that sees it ends the wait.
  await eventually(() => rowInDatabaseFile(path, first.requestId), 5000);
  // 13,000 rows, most of them one to a commit (about a page each). The writer's passes run while rows are staged, so
  // the WAL only starts again from its beginning when a pass past 16 MB runs with nothing appended: without that it
  // grew to 61 MB here (18.7 MB with it, 25.3 MB in 4 of 33 runs while the process was busy with other tests' threads).
  expect(largestWal).toBeGreaterThan(0);
  expect(Bun.file(`${path}-wal`).size).toBeLessThan(32 * 1024 * 1024);
  expect(largestWal).toBeLessThan(32 * 1024 * 1024);
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

test("staged rows are moved into usage_ledger and the aggregates within moments, quiet and busy alike, with nobody asking", async () => {
  const { ledger, reader } = setup();
  for (let index = 0; index < 3; index++) await ledger.record(row());
  await Promise.all(Array.from({ length: 20 }, () => ledger.record(row())));
  for (let index = 0; index < 3; index++) await ledger.record(row());
  const deadline = performance.now() + 2000;
  while (count(reader, "SELECT count(*) AS value FROM usage_ledger") < 26 && performance.now() < deadline) await Bun.sleep(5);
  expect(count(reader, "SELECT count(*) AS value FROM usage_ledger")).toBe(26);
  expect(count(reader, "SELECT count(*) AS value FROM usage_ledger_inbox")).toBe(0);
  expect(count(reader, "SELECT sum(tokens) AS value FROM usage_minutes")).toBe(26 * 15);
  expect(count(reader, "SELECT sum(tokens) AS value FROM usage_months")).toBe(26 * 15);
});

test("no move is asked while the writer runs a checkpoint pass: staged rows wait for the pass to end, then move", async () => {
  const { ledger, reader } = setup();
  const moved = () => count(reader, "SELECT count(*) AS value FROM usage_ledger");
  const staged = () => count(reader, "SELECT count(*) AS value FROM usage_ledger_inbox");
  const until = async (done: () => boolean) => {
    const deadline = performance.now() + 2000;
    while (!done() && performance.now() < deadline) await Bun.sleep(5);
  };
  // A quiet writer first: twenty rows moved (more than a move on this thread takes, so the writer thread starts),
  // and the pass after its move over.
  await Promise.all(Array.from({ length: 20 }, () => ledger.record(row())));
  await until(() => moved() === 20);
  expect(writerStarted(ledger)).toBe(true);
  await Bun.sleep(50);
  // The flag the writer raises in the array both threads share while its pass runs (ledger-worker.ts), held here
  // as a pass of 150 ms would hold it.
  const progress = (ledger as unknown as { progress: Int32Array }).progress;
  Atomics.store(progress, 3, 1);
  for (let index = 0; index < 5; index++) await ledger.record(row());
  await Bun.sleep(150);
  expect(staged()).toBe(5);
  expect(moved()).toBe(20);
  Atomics.store(progress, 3, 0);
  await until(() => staged() === 0);
  expect(moved()).toBe(25);
  expect(count(reader, "SELECT sum(tokens) AS value FROM usage_minutes")).toBe(25 * 15);
});

test("opening the database moves the rows a crash left staged, each counted once", async () => {
  const directory = temporaryDirectory();
  cleanups.push(() => directory.remove());
  const path = join(directory.path, "sluice.db");
  openDatabase(path).close();
  // What a server killed between staging and moving leaves behind.
  const crashed = new Database(path);
  const stage = crashed.query(
    `INSERT INTO usage_ledger_inbox (request_id, organization_id, key_id, model, prompt_tokens, completion_tokens, reasoning_tokens, outcome,
       error_code, rule_id, usage_source, started_at, ended_at, first_token_ms) VALUES (?, 'org_a', 'key_a', 'm', 10, 5, 0, 'completed', NULL, NULL, 'upstream', ?, ?, NULL)`,
  );
  const now = Date.now();
  for (let index = 0; index < 7; index++) stage.run(`req_crash${index}`, now, now);
  // A row staged twice (a replay) is in the ledger once and counted once.
  stage.run("req_crash0", now, now);
  crashed.close();
  const reopened = openDatabase(path);
  const count = (sql: string) => (reopened.sqlite.query(sql).get() as { value: number }).value;
  expect(count("SELECT count(*) AS value FROM usage_ledger_inbox")).toBe(0);
  expect(count("SELECT count(*) AS value FROM usage_ledger")).toBe(7);
  expect(count("SELECT sum(tokens) AS value FROM usage_months")).toBe(7 * 15);
  reopened.close();
  // Opening again moves nothing twice, and a replay of a row already moved counts nothing.
  const replay = new Database(path);
  replay
    .query(
      `INSERT INTO usage_ledger_inbox (request_id, organization_id, key_id, model, prompt_tokens, completion_tokens, reasoning_tokens, outcome,
       error_code, rule_id, usage_source, started_at, ended_at, first_token_ms) VALUES ('req_crash1', 'org_a', 'key_a', 'm', 10, 5, 0, 'completed', NULL, NULL, 'upstream', ?1, ?1, NULL)`,
    )
    .run(now);
  replay.close();
  const again = openDatabase(path);
  expect((again.sqlite.query("SELECT count(*) AS value FROM usage_ledger").get() as { value: number }).value).toBe(7);
  expect((again.sqlite.query("SELECT sum(tokens) AS value FROM usage_months").get() as { value: number }).value).toBe(7 * 15);
  // A move of nothing but a replay still empties the inbox.
  expect((again.sqlite.query("SELECT count(*) AS value FROM usage_ledger_inbox").get() as { value: number }).value).toBe(0);
  again.close();
});

test("a move with nothing staged writes nothing: not a page of the WAL", () => {
  const directory = temporaryDirectory();
  cleanups.push(() => directory.remove());
  const path = join(directory.path, "sluice.db");
  const handle = openDatabase(path);
  cleanups.unshift(() => handle.close());
  handle.sqlite.run("PRAGMA wal_checkpoint(TRUNCATE)");
  expect(Bun.file(`${path}-wal`).size).toBe(0);
  expect(moveStagedRows(handle.sqlite)).toBe(0);
  expect(Bun.file(`${path}-wal`).size).toBe(0);
});

test("a usage reset counts staged rows once: moved before the aggregates are rebuilt, never added again after", async () => {
  const { database, ledger, reader } = setup();
  const before = Date.now() - 60_000;
  stageRows(database.sqlite, [row({ startedAt: before, endedAt: before }), row(), row()]);
  expect(count(reader, "SELECT count(*) AS value FROM usage_ledger_inbox")).toBe(3);
  // Only what ended after the reset counts: the two recent rows.
  await sqliteStorage(database).usage.reset("org_a", before + 1);
  expect(count(reader, "SELECT count(*) AS value FROM usage_ledger_inbox")).toBe(0);
  expect(count(reader, "SELECT sum(tokens) AS value FROM usage_months")).toBe(2 * 15);
  ledger.flush();
  expect(count(reader, "SELECT sum(tokens) AS value FROM usage_months")).toBe(2 * 15);
  expect(count(reader, "SELECT count(*) AS value FROM usage_ledger")).toBe(3);
});

// Last in the file: the threads it ends and starts again leave the process busier for a while.
test("a writer thread that dies or ends unasked leaves no row waiting: a new thread writes the next rows", async () => {
  const endings: [string, (worker: Worker) => void][] = [
    // An uncaught error on its thread (an open it cannot do).
    ["error", (worker) => worker.postMessage({ type: "open", path: join("/dev/null", "nowhere.db"), progress: new SharedArrayBuffer(16) })],
    // The thread stopped without an error.
    ["close", (worker) => worker.terminate()],
  ];
  for (const [name, end] of endings) {
    const { ledger, path, reader } = setup();
    await Promise.all(Array.from({ length: 30 }, () => ledger.record(row())));
    // A move of more rows than this thread takes starts the writer thread.
    await eventually(() => count(reader, "SELECT count(*) AS value FROM usage_ledger") === 30, 2000);
    expect(writerStarted(ledger)).toBe(true);
    // Past its first second: a thread that dies at once is not restarted (below).
    await Bun.sleep(1100);
    const first = (ledger as unknown as { worker: Worker }).worker;
    // The lock held elsewhere: this turn's row goes to the writer thread, to the one that ends or to its successor.
    const holder = new Database(path);
    holder.run("BEGIN IMMEDIATE");
    holder.run("UPDATE change_counter SET version = version");
    end(first);
    let settled = false;
    const held = ledger.record(row()).then(
      () => "committed",
      (error: RowNotRecorded) => String(error.cause),
    );
    void held.then(() => {
      settled = true;
    });
    await Bun.sleep(300);
    holder.run("COMMIT");
    holder.close();
    // Committed by the next thread, or refused as the writer's: never left waiting.
    await eventually(() => settled, 3000).catch(() => {
      throw new Error(`${name}: the row held by the writer thread that ended was never settled`);
    });
    expect(await held).toMatch(/^committed$|writer stopped/);
    const next = row();
    await ledger.record(next);
    await eventually(() => count(reader, `SELECT count(*) AS value FROM usage_ledger WHERE request_id = '${next.requestId}'`) === 1, 5000);
    expect((ledger as unknown as { worker: Worker | undefined }).worker).not.toBe(first);
  }

  // A thread that ends in its first second (its database cannot be opened, say) is not started again in a loop: rows
  // are refused, not left waiting, and the listener hears of each (the metric of refused rows counts them).
  const told: number[] = [];
  const { ledger } = setup((_error, rows) => told.push(rows));
  await Promise.all(Array.from({ length: 30 }, () => ledger.record(row())));
  await eventually(() => writerStarted(ledger), 2000);
  (ledger as unknown as { worker: Worker }).worker.terminate();
  await eventually(() => !writerStarted(ledger), 2000);
  // The thread's end, with no row in flight.
  expect(told).toEqual([0]);
  expect((await refusal(ledger.record(row()))).cause).toContain("writer stopped");
  const refusedTogether = await Promise.all([refusal(ledger.record(row())), refusal(ledger.record(row()))]);
  expect(refusedTogether.map((error) => error.cause)).toEqual([expect.stringContaining("writer stopped"), expect.stringContaining("writer stopped")]);
  expect(told).toEqual([0, 1, 2]);
  expect(ledger.problem()).toMatch(/writer stopped/);
});

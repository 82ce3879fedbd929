import { Database } from "bun:sqlite";
import { expect, test } from "bun:test";
import { join } from "node:path";
import { openDatabase } from "../../src/db/client";
import { temporaryDirectory } from "../helpers";

/** A server's database in a fresh directory; `poll` reads its change counter and says how often its listeners ran. */
function watchedDatabase() {
  const directory = temporaryDirectory();
  const path = join(directory.path, "sluice.db");
  const database = openDatabase(path);
  let wakes = 0;
  database.onExternalChange(() => wakes++);
  const poll = () => {
    database.pollExternalChanges();
    return wakes;
  };
  return { directory, path, database, poll };
}

test("another connection's writes: ledger rows do not wake the server's caches; keys, organizations and resets do", () => {
  const { directory, path, database, poll } = watchedDatabase();
  const other = new Database(path);
  // Each write by the other connection, and the wakes counted after it: only what the caches hold counts.
  const writes: [sql: string, wakesAfter: number][] = [
    [
      "INSERT INTO usage_ledger (request_id, organization_id, key_id, model, prompt_tokens, completion_tokens, reasoning_tokens, outcome, usage_source, started_at, ended_at) VALUES ('r1', 'o', 'k', 'm', 1, 1, 0, 'completed', 'upstream', 0, 0)",
      0,
    ],
    ["INSERT INTO usage_minutes (organization_id, minute, tokens, last_time) VALUES ('o', 1, 2, 0)", 0],
    ["INSERT INTO organizations (id, name, plan, status, created_at) VALUES ('o', 'acme', 'default', 'active', 0)", 1],
    ["INSERT INTO api_keys (id, organization_id, name, prefix, hash, created_at) VALUES ('k', 'o', 'k', 'p', 'h', 0)", 2],
    ["UPDATE api_keys SET last_used_at = 5 WHERE id = 'k'", 2],
    ["UPDATE api_keys SET revoked_at = 6 WHERE id = 'k'", 3],
    ["UPDATE organizations SET status = 'suspended' WHERE id = 'o'", 4],
    ["INSERT INTO usage_resets (organization_id, reset_at) VALUES ('o', 7)", 5],
  ];
  for (const [sql, wakesAfter] of writes) {
    other.run(sql);
    expect([sql, poll()]).toEqual([sql, wakesAfter]);
  }
  other.close();
  database.close();
  directory.remove();
});

test("the change counter read on another connection of this thread: changes found there, and again on the server's once it closes", () => {
  const { directory, path, database, poll } = watchedDatabase();
  // As the ledger's staging connection: it waits for no lock.
  const staging = new Database(path, { strict: true });
  staging.run("PRAGMA busy_timeout = 0");
  database.readChangesOn(staging);
  const other = new Database(path);
  other.run("INSERT INTO organizations (id, name, plan, status, created_at) VALUES ('o', 'acme', 'default', 'active', 0)");
  expect(poll()).toBe(1);
  // A change only that connection sees (its own, not yet committed): the read is made there.
  staging.run("BEGIN");
  staging.run("UPDATE change_counter SET version = version + 100 WHERE id = 1");
  expect(poll()).toBe(2);
  staging.run("ROLLBACK");
  expect(poll()).toBe(3);
  // Its own ledger writes move no counter.
  staging.run(
    "INSERT INTO usage_ledger_inbox (request_id, organization_id, key_id, model, prompt_tokens, completion_tokens, reasoning_tokens, outcome, usage_source, started_at, ended_at) VALUES ('r1', 'o', 'k', 'm', 1, 1, 0, 'completed', 'upstream', 0, 0)",
  );
  expect(poll()).toBe(3);
  staging.close();
  other.run("UPDATE organizations SET status = 'suspended' WHERE id = 'o'");
  expect(poll()).toBe(4);
  other.run("INSERT INTO usage_resets (organization_id, reset_at) VALUES ('o', 7)");
  expect(poll()).toBe(5);
  other.close();
  database.close();
  directory.remove();
});

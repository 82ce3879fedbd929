// The PostgreSQL repositories against a real server: the queries that the console, the CLI and admission's rebuild
// run, answered as the SQLite ones answer them.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { postgresStorage } from "../../src/storage/postgres";
import type { ChangeFeed, Storage } from "../../src/storage/types";
import { startPostgres, type PostgresServer } from "../support/services";

let postgres: PostgresServer;
let storage: Storage;
const quiet: ChangeFeed = { onChange() {}, check() {}, async announce() {} };

beforeAll(async () => {
  postgres = await startPostgres();
  storage = await postgresStorage(await postgres.createDatabase("repositories"), quiet);
});
afterAll(async () => {
  await storage?.close();
  postgres?.stop();
});

test("ledger rows, aggregates, hourly series, refusals, last use and credentials", async () => {
  const ledger = storage.openLedger();
  await storage.organizations.insert({ id: "org_1", name: "acme", plan: "default", status: "active", createdAt: 1 });
  await storage.keys.insert({
    id: "key_1",
    organizationId: "org_1",
    name: "laptop",
    prefix: "sk-sluice-ab",
    hash: "h1",
    createdAt: 1,
    lastUsedAt: null,
    expiresAt: null,
    revokedAt: null,
    maxConcurrency: null,
    tokensPer5h: null,
    tokensPerMonth: null,
  });
  const now = Date.now();
  const row = (index: number) => ({
    requestId: `req_${index}`,
    organizationId: "org_1",
    keyId: "key_1",
    model: "m",
    promptTokens: 10,
    completionTokens: 5,
    reasoningTokens: 0,
    outcome: index === 3 ? ("content_filter" as const) : ("completed" as const),
    errorCode: null,
    ruleId: index === 3 ? "rule-1" : null,
    usageSource: "upstream" as const,
    startedAt: now,
    endedAt: now,
    firstTokenMs: index === 2 ? 40 : null,
  });
  await Promise.all([1, 2, 3].map((index) => ledger.record(row(index))));
  // A row recorded twice (a retry after a lost answer) counts once, in the ledger and in the aggregates.
  await ledger.record(row(1));
  ledger.touchKeys([["key_1", now]]);
  await ledger.flush();
  expect(await storage.usage.hourly("org_1", now - 3_600_000)).toEqual([{ hour: Math.floor(now / 3_600_000), model: "m", keyName: "laptop", tokens: 45 }]);
  const usage = (await storage.usage.read(now)).get("org_1");
  expect(usage?.monthTokens).toBe(45);
  expect(usage?.buckets.reduce((sum, bucket) => sum + bucket.tokens, 0)).toBe(45);
  expect(await storage.usage.refusalsByRule(0)).toEqual([{ ruleId: "rule-1", count: 1, last: now }]);
  expect(await storage.usage.recentRefusals(0, 5)).toEqual([{ endedAt: now, requestId: "req_3", organization: "acme", model: "m", ruleId: "rule-1" }]);
  expect((await storage.keys.find("key_1"))?.lastUsedAt).toBe(now);
  expect((await storage.keys.credentials("h1"))?.organizationName).toBe("acme");
  // A reset: what ended before it stops counting; the aggregates are rebuilt from the rows after it.
  await storage.usage.reset("org_1", now);
  expect((await storage.usage.read(now)).get("org_1")).toBeUndefined();
  expect((await storage.usage.resets()).get("org_1")).toBe(now);
  await ledger.close();
});

test("sign-in failures: counted in one window, restarted after it, cleared", async () => {
  await storage.accounts.addFailure("a@example.com", 1000, 0);
  await storage.accounts.addFailure("a@example.com", 2000, 0);
  expect(await storage.accounts.failures("a@example.com")).toEqual({ count: 2, since: 1000 });
  await storage.accounts.addFailure("a@example.com", 5000, 1500);
  expect(await storage.accounts.failures("a@example.com")).toEqual({ count: 1, since: 5000 });
  await storage.accounts.clearFailures("a@example.com");
  expect(await storage.accounts.failures("a@example.com")).toBeUndefined();
});

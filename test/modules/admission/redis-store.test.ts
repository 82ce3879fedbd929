// The shared admission store against a real Redis and PostgreSQL, below the HTTP layer: the races between instances
// that the cluster tests can only hit by chance.
import { afterAll, beforeAll, expect, test } from "bun:test";
import type { PlanConfig } from "../../../src/config/schema";
import { RedisAdmissionStore } from "../../../src/modules/admission/redis-store";
import { postgresStorage } from "../../../src/storage/postgres";
import { RedisConnection } from "../../../src/storage/redis";
import type { ChangeFeed, Storage } from "../../../src/storage/types";
import { startPostgres, startRedis, type PostgresServer, type RedisServer } from "../../support/services";

let postgres: PostgresServer;
let redis: RedisServer;
let storage: Storage;
const quiet: ChangeFeed = { onChange() {}, check() {}, async announce() {} };

beforeAll(async () => {
  [postgres, redis] = await Promise.all([startPostgres(), startRedis()]);
  storage = await postgresStorage(await postgres.createDatabase("admission"), quiet);
});
afterAll(async () => {
  await storage?.close();
  postgres?.stop();
  await redis?.stop();
});

const plan: PlanConfig = { id: "default", models: ["*"], tokensPer5h: 1000, maxConcurrency: 5 };
const request = { organizationId: "org_1", plan, modelId: "m", promptTokens: 10, maxTokens: 20 };

test("a rebuild asked for after another instance finished one does nothing: leases admitted in between still settle and count", async () => {
  const first = new RedisConnection(redis.url);
  const second = new RedisConnection(redis.url);
  const one = new RedisAdmissionStore(first, storage.usage, storage.keys);
  const other = new RedisAdmissionStore(second, storage.usage, storage.keys);
  try {
    while (!first.connected || !second.connected) await Bun.sleep(10);
    await first.call("FLUSHALL", []);
    // The first request finds the state missing and rebuilds it (nothing in the ledger yet).
    const lease = await one.admit(request, Date.now());
    expect(lease.reservedTokens).toBe(30);
    // The other instance found the state missing too, just before that rebuild ended, and asks for its own now.
    await other.rebuildFromLedger();
    lease.settle({ promptTokens: 10, completionTokens: 20 }, Date.now());
    let snapshot = await other.snapshot("org_1", plan, Date.now());
    for (let attempt = 0; attempt < 100 && snapshot.inFlight > 0; attempt++) {
      await Bun.sleep(20);
      snapshot = await other.snapshot("org_1", plan, Date.now());
    }
    // Settled in the generation it was admitted in: its place is free and its tokens count.
    expect(snapshot.inFlight).toBe(0);
    expect(snapshot.reserved).toBe(0);
    expect(snapshot.fiveHours.used).toBe(30);
  } finally {
    one.close();
    other.close();
    first.close();
    second.close();
  }
});

// The shared admission store against a real Redis and PostgreSQL, below the HTTP layer: the races between instances
// that the cluster tests can only hit by chance.
import { expect, test } from "bun:test";
import type { PlanConfig } from "../../../src/config/schema";
import { MemoryAdmissionStore } from "../../../src/modules/admission/memory-store";
import { cachedSubjects, RedisAdmissionStore, subjectKeys } from "../../../src/modules/admission/redis-store";
import { AdmissionRejected, type Lease, type UsageSnapshot } from "../../../src/modules/admission/store";
import { RedisConnection } from "../../../src/storage/redis";
import { ledgerRow } from "../../helpers";
import { useAdmissionServices } from "../../support/services";

const services = useAdmissionServices("admission");

/** The organization's usage once nothing is in flight (settles reach Redis just after the call), or after 2 s. */
async function settledSnapshot(store: RedisAdmissionStore, organizationId: string, limits: PlanConfig): Promise<UsageSnapshot> {
  let snapshot = await store.snapshot(organizationId, limits, Date.now());
  for (let attempt = 0; attempt < 100 && snapshot.inFlight > 0; attempt++) {
    await Bun.sleep(20);
    snapshot = await store.snapshot(organizationId, limits, Date.now());
  }
  return snapshot;
}

const plan: PlanConfig = { id: "default", models: ["*"], tokensPer5h: 1000, maxConcurrency: 5 };
const request = { organizationId: "org_1", plan, modelId: "m", promptTokens: 10, maxTokens: 20 };

test("a rebuild asked for after another instance finished one does nothing: leases admitted in between still settle and count", async () => {
  const first = new RedisConnection(services.redis.url);
  const second = new RedisConnection(services.redis.url);
  const one = new RedisAdmissionStore(first, services.storage.usage, services.storage.keys);
  const other = new RedisAdmissionStore(second, services.storage.usage, services.storage.keys);
  try {
    while (!first.connected || !second.connected) await Bun.sleep(10);
    await first.call("FLUSHALL", []);
    // The first request finds the state missing and rebuilds it (nothing in the ledger yet).
    const lease = await one.admit(request, Date.now());
    expect(lease.reservedTokens).toBe(30);
    // The other instance found the state missing too, just before that rebuild ended, and asks for its own now.
    await other.rebuildFromLedger();
    lease.settle({ promptTokens: 10, completionTokens: 20 }, Date.now());
    const snapshot = await settledSnapshot(other, "org_1", plan);
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

/** How many script calls (EVAL and EVALSHA) Redis has run so far. */
async function scriptCalls(connection: RedisConnection): Promise<number> {
  const stats = String(await connection.call("INFO", ["commandstats"]));
  return [...stats.matchAll(/cmdstat_eval(?:sha)?:calls=(\d+)/g)].reduce((sum, match) => sum + Number(match[1]), 0);
}

/** Runs `body` with a store of its own on a connected Redis whose state is rebuilt; closes both after. */
async function withStore(body: (store: RedisAdmissionStore, connection: RedisConnection) => Promise<void>): Promise<void> {
  const connection = new RedisConnection(services.redis.url);
  const store = new RedisAdmissionStore(connection, services.storage.usage, services.storage.keys);
  try {
    while (!connection.connected) await Bun.sleep(10);
    await store.rebuildFromLedger();
    await body(store, connection);
  } finally {
    store.close();
    connection.close();
  }
}

test("a burst of 300 admits in one instance reaches Redis as a few script calls, and admits exactly what one call each would", async () => {
  await withStore(async (store, connection) => {
    const burstPlan: PlanConfig = { id: "default", models: ["*"], tokensPer5h: 3000, maxConcurrency: 120 };
    const burst = { ...request, organizationId: "org_burst", plan: burstPlan };
    // The same 300 requests, one after the other, in one process's memory: what exactness means.
    const memory = new MemoryAdmissionStore();
    const expected = Array.from({ length: 300 }, () => {
      try {
        return memory.admit(burst, Date.now()).reservedTokens;
      } catch (error) {
        return (error as AdmissionRejected).kind;
      }
    });
    await store.admit(burst, Date.now()).then((lease) => lease.settle(null, Date.now()));
    while ((await store.snapshot("org_burst", burstPlan, Date.now())).inFlight > 0) await Bun.sleep(10);
    const callsBefore = await scriptCalls(connection);
    const outcomes = await Promise.all(
      Array.from({ length: 300 }, () =>
        store.admit(burst, Date.now()).then(
          (lease) => lease,
          (error: AdmissionRejected) => error,
        ),
      ),
    );
    const calls = (await scriptCalls(connection)) - callsBefore;
    // The first alone, the rest in batches of at most 200.
    expect(calls).toBeGreaterThanOrEqual(2);
    expect(calls).toBeLessThanOrEqual(4);
    expect(outcomes.map((outcome) => (outcome instanceof AdmissionRejected ? outcome.kind : outcome.reservedTokens))).toEqual(expected);
    const admitted = outcomes.filter((outcome): outcome is Lease => !(outcome instanceof AdmissionRejected));
    expect(admitted).toHaveLength(100);
    expect((await store.snapshot("org_burst", burstPlan, Date.now())).inFlight).toBe(100);
    for (const lease of admitted) lease.settle({ promptTokens: 10, completionTokens: 5 }, Date.now());
    const snapshot = await settledSnapshot(store, "org_burst", burstPlan);
    expect(snapshot.inFlight).toBe(0);
    expect(snapshot.reserved).toBe(0);
    expect(snapshot.fiveHours.used).toBe(100 * 15);
  });
});

test("a settle sent twice counts once; a lease that expired before its settle arrived counts what it spent, once", async () => {
  await withStore(async (store, connection) => {
    const generation = String(await connection.call("GET", ["sluice:ready"]));
    const keys = ["sluice:ready", ...subjectKeys("org_settles")];
    // A lease of 100 ms, a 5-hour limit of 100,000, a concurrency cap of 10 and no requests per minute; need 11, reserve 30.
    const admit = async (leaseId: string) => ((await connection.script("admit", keys, ["admit", 100, 100_000, -1, 10, -1, 11, 30, leaseId])) as number[][])[0];
    const settle = (leaseId: string, tokens: number) => connection.script("settle", keys, [generation, leaseId, tokens]);
    const quotaPlan: PlanConfig = { id: "default", models: ["*"], tokensPer5h: 100_000, maxConcurrency: 10 };
    const state = () => store.snapshot("org_settles", quotaPlan, Date.now());

    expect((await admit("lease-a"))?.[0]).toBe(0);
    expect(await settle("lease-a", 15)).toBe(1);
    // The answer was lost, say, and the instance sends it again.
    expect(await settle("lease-a", 15)).toBe(0);
    expect(await state()).toMatchObject({ inFlight: 0, reserved: 0, fiveHours: { used: 15 } });

    expect((await admit("lease-b"))?.[0]).toBe(0);
    await Bun.sleep(150);
    // lease-b expired unsettled: the next admission frees its place and reservation.
    expect((await admit("lease-c"))?.[0]).toBe(0);
    expect(await state()).toMatchObject({ inFlight: 1, reserved: 30, fiveHours: { used: 15 } });
    // Its settle, late, still counts what it spent, once.
    expect(await settle("lease-b", 20)).toBe(1);
    expect(await settle("lease-b", 20)).toBe(0);
    expect(await state()).toMatchObject({ inFlight: 1, reserved: 30, fiveHours: { used: 35 } });
    // Both in one batch, one of them twice: counted once each.
    expect(await connection.script("settle", keys, [generation, "lease-c", 7, "lease-c", 7, "lease-b", 20])).toBe(1);
    expect(await state()).toMatchObject({ inFlight: 0, reserved: 0, fiveHours: { used: 42 } });
  });
});

test("workers that each send their next request after their last answer never exceed max_concurrency = workers: every settle reaches Redis before the admit that follows it", async () => {
  await withStore(async (store) => {
    const capPlan: PlanConfig = { id: "default", models: ["*"], maxConcurrency: 4 };
    const capped = { ...request, organizationId: "org_sequential", plan: capPlan };
    let refused = 0;
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        for (let turn = 0; turn < 100; turn++) {
          try {
            const lease = await store.admit(capped, Date.now());
            await Bun.sleep(0);
            lease.settle({ promptTokens: 10, completionTokens: 5 }, Date.now());
          } catch {
            refused++;
          }
        }
      }),
    );
    expect(refused).toBe(0);
  });
});

test("the script keys kept per organization stay bounded: past the bound the oldest go, and an evicted organization's lease still settles and counts", async () => {
  await withStore(async (store) => {
    const kept = () => (store as unknown as { subjects: Map<string, unknown> }).subjects.size;
    const first = await store.admit({ ...request, organizationId: "org_evicted" }, Date.now());
    for (let start = 0; start < cachedSubjects + 50; start += 1000) {
      const count = Math.min(1000, cachedSubjects + 50 - start);
      const leases = await Promise.all(
        Array.from({ length: count }, (_, index) => store.admit({ ...request, organizationId: `org_many_${start + index}` }, Date.now())),
      );
      for (const lease of leases) lease.settle(null, Date.now());
    }
    expect(kept()).toBe(cachedSubjects);
    // org_evicted's keys were the oldest, so they went first: its lease settles through the keys it was admitted with.
    first.settle({ promptTokens: 10, completionTokens: 5 }, Date.now());
    const snapshot = await settledSnapshot(store, "org_evicted", plan);
    expect(snapshot.inFlight).toBe(0);
    expect(snapshot.reserved).toBe(0);
    expect(snapshot.fiveHours.used).toBe(15);
    expect(kept()).toBe(cachedSubjects);
  });
}, 30_000);

test("requests per minute across two instances: 200 concurrent admits against 50 a minute admit 50, each with its own remaining count", async () => {
  await withStore(async (store) => {
    const connection = new RedisConnection(services.redis.url);
    const other = new RedisAdmissionStore(connection, services.storage.usage, services.storage.keys);
    try {
      while (!connection.connected) await Bun.sleep(10);
      const ratePlan: PlanConfig = { id: "default", models: ["*"], requestsPerMinute: 50, maxConcurrency: 1000 };
      const paced = { ...request, organizationId: "org_paced", plan: ratePlan };
      const started = Date.now();
      const outcomes = await Promise.all(
        Array.from({ length: 200 }, (_, index) =>
          (index % 2 === 0 ? store : other).admit(paced, Date.now()).then(
            (lease) => lease,
            (error: unknown) => error,
          ),
        ),
      );
      // The bucket refills one request each 1.2 s: a slow run may see one or two more.
      const refills = Math.floor(((Date.now() - started) * 50) / 60_000);
      const leases = outcomes.filter((outcome): outcome is Lease => !(outcome instanceof Error));
      expect(leases.length).toBeGreaterThanOrEqual(50);
      expect(leases.length).toBeLessThanOrEqual(50 + refills);
      for (const refusal of outcomes.filter((outcome) => outcome instanceof Error)) {
        expect(refusal).toBeInstanceOf(AdmissionRejected);
        expect((refusal as AdmissionRejected).kind).toBe("requests");
        expect((refusal as AdmissionRejected).headers()["retry-after"]).toBe("2");
      }
      const remaining = leases.map((lease) => Number(lease.headers["x-ratelimit-remaining-requests"])).sort((a, b) => a - b);
      if (refills === 0) expect(remaining).toEqual(Array.from({ length: 50 }, (_, index) => index));
      for (const lease of leases) lease.settle(null, Date.now());
      const snapshot = await settledSnapshot(store, "org_paced", ratePlan);
      expect(snapshot.inFlight).toBe(0);
      expect(snapshot.requests).toMatchObject({ limit: 50, remaining: 0 });
    } finally {
      other.close();
      connection.close();
    }
  });
});

test("a Redis that lost its data: the rebuild replays the last minute's recorded requests into the requests-per-minute buckets", async () => {
  // The key has a rate of its own, 2 a minute.
  await services.storage.organizations.insert({ id: "org_replayed", name: "replayed", plan: "default", status: "active", createdAt: 1 });
  await services.storage.keys.insert({
    id: "key_replayed",
    organizationId: "org_replayed",
    name: "paced",
    prefix: "sk-sluice-re",
    hash: "replayed-hash",
    createdAt: 1,
    lastUsedAt: null,
    expiresAt: null,
    revokedAt: null,
    maxConcurrency: null,
    tokensPer5h: null,
    tokensPerMonth: null,
    requestsPerMinute: 2,
    models: null,
    networks: null,
  });
  const ledger = services.storage.openLedger();
  const now = Date.now();
  const row = (requestId: string, startedAt: number) =>
    ledgerRow({ requestId, organizationId: "org_replayed", keyId: "key_replayed", promptTokens: 1, completionTokens: 1, startedAt, endedAt: startedAt + 5 });
  // Three requests in the last seconds, and one from two minutes ago that no longer counts.
  await Promise.all(
    [row("req_replayed_old", now - 120_000), row("req_replayed_1", now - 3000), row("req_replayed_2", now - 2000), row("req_replayed_3", now - 1000)].map(
      (each) => ledger.record(each),
    ),
  );
  await ledger.close();
  const connection = new RedisConnection(services.redis.url);
  const store = new RedisAdmissionStore(connection, services.storage.usage, services.storage.keys, undefined, async (organizationId) =>
    organizationId === "org_replayed" ? 3 : undefined,
  );
  try {
    while (!connection.connected) await Bun.sleep(10);
    await connection.call("FLUSHALL", []);
    await store.rebuildFromLedger();
    const ratePlan: PlanConfig = { id: "default", models: ["*"], requestsPerMinute: 3 };
    // Three a minute, three taken in the last 3 s: about a seventh of one back, so the next waits about 17 s.
    const refused = await store.admit({ ...request, organizationId: "org_replayed", plan: ratePlan }, Date.now()).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(AdmissionRejected);
    expect((refused as AdmissionRejected).kind).toBe("requests");
    const wait = Number((refused as AdmissionRejected).headers()["retry-after"]);
    expect(wait).toBeGreaterThanOrEqual(15);
    expect(wait).toBeLessThanOrEqual(18);
    // The key's own bucket: 2 a minute, three taken in the last 3 s; empty, its next request about 29 s away.
    const byKey = await store
      .admit(
        { ...request, organizationId: "org_replayed", plan: { id: "default", models: ["*"] }, key: { id: "key_replayed", limits: { requestsPerMinute: 2 } } },
        Date.now(),
      )
      .catch((error: unknown) => error);
    expect(byKey).toBeInstanceOf(AdmissionRejected);
    expect((byKey as AdmissionRejected).message).toContain("This API key has reached the limit of 2 requests per minute");
    const keyWait = Number((byKey as AdmissionRejected).headers()["retry-after"]);
    expect(keyWait).toBeGreaterThanOrEqual(27);
    expect(keyWait).toBeLessThanOrEqual(30);
    // An organization without recent requests starts full.
    const other = await store.admit({ ...request, organizationId: "org_quiet", plan: ratePlan }, Date.now());
    expect(other.headers["x-ratelimit-remaining-requests"]).toBe("2");
    other.settle(null, Date.now());
  } finally {
    store.close();
    connection.close();
  }
});

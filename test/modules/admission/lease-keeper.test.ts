// The lease keeper against a real Redis and PostgreSQL: what happens to the places of requests under way when Redis
// loses its data (a restart without persistence, a failover) and the state is rebuilt from the ledger.
import { expect, test } from "bun:test";
import type { ModelConfig, PlanConfig } from "../../../src/config/schema";
import { LeaseKeeper, rebuiltChannel } from "../../../src/modules/admission/lease-keeper";
import { RedisAdmissionStore } from "../../../src/modules/admission/redis-store";
import { AdmissionRejected, type Lease, type UsageSnapshot } from "../../../src/modules/admission/store";
import { SharedModelQueue } from "../../../src/modules/queue/shared-model-queue";
import { generationKey, RedisConnection } from "../../../src/storage/redis";
import { leasesHeld, useAdmissionServices } from "../../support/services";

const services = useAdmissionServices("keeper");

const plan: PlanConfig = { id: "default", models: ["*"], tokensPer5h: 1000, maxConcurrency: 3 };

/** One instance's admission: a store and its keeper on a connection of their own, closed after `body`. */
async function withInstance(body: (store: RedisAdmissionStore, keeper: LeaseKeeper, connection: RedisConnection) => Promise<void>): Promise<void> {
  const connection = new RedisConnection(services.redis.url);
  const keeper = new LeaseKeeper(connection);
  const store = new RedisAdmissionStore(connection, services.storage.usage, services.storage.keys, keeper);
  try {
    while (!connection.connected) await Bun.sleep(10);
    await body(store, keeper, connection);
  } finally {
    await store.close();
    keeper.close();
    connection.close();
  }
}

function admit(store: RedisAdmissionStore, organizationId: string): Promise<Lease> {
  return store.admit({ organizationId, plan, modelId: "m", promptTokens: 10, maxTokens: 20 }, Date.now());
}

/** The organization's usage once the settles sent have landed (they go without waiting), or after 2 s. */
async function settled(store: RedisAdmissionStore, organizationId: string): Promise<UsageSnapshot> {
  let snapshot = await store.snapshot(organizationId, plan, Date.now());
  for (let attempt = 0; attempt < 100 && snapshot.inFlight > 0; attempt++) {
    await Bun.sleep(20);
    snapshot = await store.snapshot(organizationId, plan, Date.now());
  }
  return snapshot;
}

test("Redis loses its data while three requests run: the next renewal puts their places back, and their settles record what they spent in the rebuilt state", async () => {
  await withInstance(async (store, keeper, connection) => {
    const running = await Promise.all([admit(store, "org_lost"), admit(store, "org_lost"), admit(store, "org_lost")]);
    await connection.call("FLUSHALL", []);
    await keeper.renew();
    // The state is rebuilt from the ledger (empty for this organization); the three still hold their places.
    const refused = await admit(store, "org_lost").catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(AdmissionRejected);
    expect((refused as AdmissionRejected).kind).toBe("concurrency");
    // The rebuild started a new generation: the next renewal moves the three into it.
    await keeper.renew();
    for (const lease of running) lease.settle({ promptTokens: 10, completionTokens: 20 }, Date.now());
    const snapshot = await settled(store, "org_lost");
    expect(snapshot.inFlight).toBe(0);
    // Their rows are not in the ledger the rebuild read: their settles are what counts them.
    expect(snapshot.fiveHours.used).toBe(90);
    expect(await leasesHeld(services.redis.url)).toBe(0);
  });
});

test("Redis loses its data while requests run: their reservations come back with their leases, so a request that would overspend is refused; settled, they are freed", async () => {
  const quota: PlanConfig = { id: "quota", models: ["*"], tokensPer5h: 200, maxConcurrency: 10 };
  const admitUnder = (store: RedisAdmissionStore) =>
    store.admit({ organizationId: "org_reserved", plan: quota, modelId: "m", promptTokens: 10, maxTokens: 20 }, Date.now());
  await withInstance(async (store, keeper, connection) => {
    const running = await Promise.all([admitUnder(store), admitUnder(store), admitUnder(store)]);
    const reservedBefore = (await store.snapshot("org_reserved", quota, Date.now())).reserved;
    expect(reservedBefore).toBe(running.reduce((sum, lease) => sum + lease.reservedTokens, 0));
    expect(reservedBefore).toBeGreaterThan(0);
    await connection.call("FLUSHALL", []);
    await keeper.renew();
    // The first admission after the loss rebuilds the state from the ledger (nothing of these three) and is admitted;
    // the renewal it starts moves the three into the new generation with their reservations.
    const fourth = await admitUnder(store);
    await keeper.renew();
    const snapshot = await store.snapshot("org_reserved", quota, Date.now());
    expect(snapshot.reserved).toBe(reservedBefore + fourth.reservedTokens);
    expect(snapshot.inFlight).toBe(4);
    // Renewed again: counted once.
    await keeper.renew();
    expect((await store.snapshot("org_reserved", quota, Date.now())).reserved).toBe(reservedBefore + fourth.reservedTokens);
    // Room left: 200 - what the four reserved. Requests whose need does not fit are refused, as before the loss.
    const admitted: Lease[] = [];
    let refusal: unknown;
    for (let attempt = 0; attempt < 10 && refusal === undefined; attempt++) {
      try {
        admitted.push(await admitUnder(store));
      } catch (error) {
        refusal = error;
      }
    }
    expect(refusal).toBeInstanceOf(AdmissionRejected);
    const reservedAll = [...running, fourth, ...admitted].reduce((sum, lease) => sum + lease.reservedTokens, 0);
    // Never past the quota: what is reserved plus the refused request's need (its prompt and one token) is over 200.
    expect(reservedAll).toBeLessThanOrEqual(200);
    expect(reservedAll + 11).toBeGreaterThan(200);
    for (const lease of [...running, fourth, ...admitted]) lease.settle({ promptTokens: 10, completionTokens: 5 }, Date.now());
    const after = await settled(store, "org_reserved");
    expect(after.inFlight).toBe(0);
    expect(after.reserved).toBe(0);
    expect(after.fiveHours.used).toBe(15 * (4 + admitted.length));
    expect(await leasesHeld(services.redis.url)).toBe(0);
  });
});

test("Redis loses its data: the instance that rebuilds the state says so, and another instance's requests under way count again at once, not at its next renewal", async () => {
  const quota: PlanConfig = { id: "quota", models: ["*"], tokensPer5h: 10_000, maxConcurrency: 10 };
  const admitUnder = (store: RedisAdmissionStore) =>
    store.admit({ organizationId: "org_told", plan: quota, modelId: "m", promptTokens: 10, maxTokens: 20 }, Date.now());
  await withInstance(async (quiet, _quietKeeper, connection) => {
    await withInstance(async (busy) => {
      const running = await Promise.all([admitUnder(quiet), admitUnder(quiet)]);
      const reserved = running.reduce((sum, lease) => sum + lease.reservedTokens, 0);
      // Both keepers listening (their subscriptions are made on their own connections, as they start).
      const listeners = async () => Number(((await connection.call("PUBSUB", ["NUMSUB", rebuiltChannel])) as [string, number])[1]);
      for (let attempt = 0; attempt < 100 && (await listeners()) < 2; attempt++) await Bun.sleep(20);
      expect(await listeners()).toBeGreaterThanOrEqual(2);
      await connection.call("FLUSHALL", []);
      // The busy instance's next admission rebuilds the state; the quiet one admits nothing, and its timer's next
      // renewal is seconds away.
      const started = Date.now();
      const fourth = await admitUnder(busy);
      let snapshot = await busy.snapshot("org_told", quota, Date.now());
      while (snapshot.inFlight < 3 && Date.now() - started < 1000) {
        await Bun.sleep(10);
        snapshot = await busy.snapshot("org_told", quota, Date.now());
      }
      expect(Date.now() - started).toBeLessThan(1000);
      expect(snapshot.inFlight).toBe(3);
      expect(snapshot.reserved).toBe(reserved + fourth.reservedTokens);
      for (const lease of [...running, fourth]) lease.settle({ promptTokens: 10, completionTokens: 5 }, Date.now());
      const after = await settled(busy, "org_told");
      expect([after.inFlight, after.reserved, after.fiveHours.used]).toEqual([0, 0, 45]);
    });
  });
});

test("a lease settled while a renewal moves it into the rebuilt generation: the reservation the renewal put back is freed, never left held", async () => {
  const quota: PlanConfig = { id: "quota", models: ["*"], tokensPer5h: 10_000, maxConcurrency: 10 };
  await withInstance(async (store, keeper, connection) => {
    const lease = await store.admit({ organizationId: "org_race", plan: quota, modelId: "m", promptTokens: 10, maxTokens: 20 }, Date.now());
    expect(lease.reservedTokens).toBeGreaterThan(0);
    await connection.call("FLUSHALL", []);
    // A rebuild another instance made, as its generation alone (its announcement is not what this test is about).
    await connection.call("SET", [generationKey, "rebuilt-elsewhere"]);
    // The renewal goes out first and puts the lease and its reservation back in the new generation; the settle goes
    // out before its answer is back, so it carries the lost generation.
    void keeper.renew();
    lease.settle({ promptTokens: 10, completionTokens: 5 }, Date.now());
    const after = await settled(store, "org_race");
    expect(after.inFlight).toBe(0);
    expect(after.reserved).toBe(0);
    expect(await leasesHeld(services.redis.url)).toBe(0);
  });
});

test("a lease of the lost generation settled before the rebuild frees its place and records nothing (its row is in the ledger the rebuild reads)", async () => {
  await withInstance(async (store, keeper, connection) => {
    const lease = await admit(store, "org_early");
    await connection.call("FLUSHALL", []);
    // Put back while Redis had no state yet: nothing to move it into.
    await keeper.renew();
    expect(await leasesHeld(services.redis.url)).toBe(1);
    lease.settle({ promptTokens: 10, completionTokens: 20 }, Date.now());
    for (let attempt = 0; attempt < 100 && (await leasesHeld(services.redis.url)) > 0; attempt++) await Bun.sleep(20);
    expect(await leasesHeld(services.redis.url)).toBe(0);
    await store.rebuildFromLedger();
    const snapshot = await settled(store, "org_early");
    expect(snapshot.inFlight).toBe(0);
    expect(snapshot.fiveHours.used).toBe(0);
  });
});

test("a model's shared slot taken before Redis lost its data is put back by the next renewal: another instance waits for it", async () => {
  const model = { id: "lost-slot", maxConcurrency: 1, queueSize: 10, queueTimeoutMs: 5000 } as ModelConfig;
  await withInstance(async (_store, keeper, connection) => {
    const other = new RedisConnection(services.redis.url);
    const otherKeeper = new LeaseKeeper(other);
    const here = new SharedModelQueue(model, connection, keeper);
    const there = new SharedModelQueue(model, other, otherKeeper);
    try {
      while (!other.connected) await Bun.sleep(10);
      const slot = await here.acquire("org_a", new AbortController().signal);
      await connection.call("FLUSHALL", []);
      await keeper.renew();
      let granted = false;
      const waiting = Promise.resolve(there.acquire("org_b", new AbortController().signal)).then((taken) => {
        granted = true;
        return taken;
      });
      await Bun.sleep(300);
      expect(granted).toBe(false);
      slot.release();
      (await waiting).release();
      expect(granted).toBe(true);
      await Promise.all([here.close(), there.close()]);
      expect(await leasesHeld(services.redis.url)).toBe(0);
    } finally {
      otherKeeper.close();
      other.close();
    }
  });
});
